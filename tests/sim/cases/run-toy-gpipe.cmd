"$MAKE_PLAN" toy.json toy dgx1 4 8 gpipe none && "$MPRESS" run toy.json --iterations 1

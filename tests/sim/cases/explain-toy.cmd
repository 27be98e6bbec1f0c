"$MAKE_PLAN" toy.json toy dgx1 4 8 1f1b mix && "$MPRESS" explain toy.json

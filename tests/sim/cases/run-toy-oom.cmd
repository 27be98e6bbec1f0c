"$MAKE_PLAN" toy.json toy dgx1 2 16 gpipe none && "$MPRESS" run toy.json --iterations 1 --svg m.svg; echo rc=$?; ls

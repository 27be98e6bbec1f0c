"$MAKE_PLAN" big.json toy dgx1 2 1431655766 1f1b none && "$MPRESS" run big.json

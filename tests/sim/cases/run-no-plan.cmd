"$MPRESS" run

"$MPRESS" run --help

"$MPRESS" compare --help

"$MPRESS" profile --help

"$MPRESS" plan --help

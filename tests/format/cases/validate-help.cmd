"$MPRESS" validate --help

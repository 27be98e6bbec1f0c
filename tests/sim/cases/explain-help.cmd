"$MPRESS" explain --help

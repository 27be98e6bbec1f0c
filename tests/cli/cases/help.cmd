"$MPRESS" help

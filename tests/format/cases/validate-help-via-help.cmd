"$MPRESS" help validate

"$MPRESS" help frobnicate

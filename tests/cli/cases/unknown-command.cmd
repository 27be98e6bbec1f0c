"$MPRESS" frobnicate

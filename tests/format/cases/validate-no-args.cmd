"$MPRESS" validate

"$MPRESS" validate nope.json

"$MPRESS" run missing.json

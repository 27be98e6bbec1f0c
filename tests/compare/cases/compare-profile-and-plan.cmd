"$MPRESS" compare "$SRC/profiles/gpt-tiny.v100.json" --plan plan.json

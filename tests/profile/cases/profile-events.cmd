"$MPRESS" profile --events "$SRC/tests/profile/events/nested.events" --model-name nested -o "$TMP/p.json" -- && cat "$TMP/p.json"

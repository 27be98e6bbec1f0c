head -c 300 $SRC/tests/format/data/profile.json > p.json && "$MPRESS" validate p.json

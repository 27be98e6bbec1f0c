sed 's/^  "version": 1/  "version": 2/' $SRC/tests/format/data/profile.json > p.json && "$MPRESS" validate p.json

sed '0,/"bytes": 524288/s//"bytes": "512 KiB"/' $SRC/tests/format/data/profile.json > p.json && "$MPRESS" validate p.json

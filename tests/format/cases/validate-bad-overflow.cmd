sed '0,/"bytes": 524288/s//"bytes": 99999999999999999999/' $SRC/tests/format/data/profile.json > p.json && "$MPRESS" validate p.json

sed 's/"fwd_s": 0.00125,/"fwd_s": 1e999,/' $SRC/tests/format/data/profile.json > p.json && "$MPRESS" validate p.json

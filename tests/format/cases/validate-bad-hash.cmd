sed '0,/"fwd_s": 0.00125/s//"fwd_s": 0.5/' $SRC/tests/format/data/plan.json > p.json && "$MPRESS" validate p.json

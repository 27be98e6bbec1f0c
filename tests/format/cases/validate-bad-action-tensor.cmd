sed 's/"tensor": "lm_head.logits"/"tensor": "lm_head.nothing"/' $SRC/tests/format/data/plan.json > p.json && "$MPRESS" validate p.json

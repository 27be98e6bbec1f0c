sed 's/"first_op": 3/"first_op": 4/' $SRC/tests/format/data/plan.json > p.json && "$MPRESS" validate p.json

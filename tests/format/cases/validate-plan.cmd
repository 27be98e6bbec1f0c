cd $SRC/tests/format/data && "$MPRESS" validate plan.json

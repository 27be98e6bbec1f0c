cd $SRC/tests/format/data && "$MPRESS" validate topology.json profile.json plan.json

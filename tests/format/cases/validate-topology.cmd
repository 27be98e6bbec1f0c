cd $SRC/tests/format/data && "$MPRESS" validate topology.json

sed 's/"fabric": "direct",/"fabric": "direct", "colour": "green",/' $SRC/tests/format/data/topology.json > t.json && "$MPRESS" validate t.json

sed 's/"host_memory_bytes": 549755813888/"host_memory_bytes": -1/' $SRC/tests/format/data/topology.json > t.json && "$MPRESS" validate t.json

sed 's/"mpress-topology"/"mpress-topo"/' $SRC/tests/format/data/topology.json > t.json && "$MPRESS" validate t.json

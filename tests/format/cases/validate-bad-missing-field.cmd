grep -v '"pcie_bytes_per_s"' $SRC/tests/format/data/topology.json > t.json && "$MPRESS" validate t.json

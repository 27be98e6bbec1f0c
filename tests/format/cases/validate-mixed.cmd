cp $SRC/tests/format/data/topology.json good.json && echo '[]' > bad.json && "$MPRESS" validate bad.json good.json

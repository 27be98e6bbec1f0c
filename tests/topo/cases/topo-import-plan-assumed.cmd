"$MPRESS" topo import "$SRC/tests/topo/data/nvswitch4.smi.txt" -o t.json 2>/dev/null && "$MPRESS" plan --topology t.json --policy none -o p.json | grep -E "^topology:"

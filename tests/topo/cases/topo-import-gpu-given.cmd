"$MPRESS" topo import "$SRC/tests/topo/data/bridge4.smi.txt" --gpu rtx-3090 -o t.json && "$MPRESS" topo show t.json

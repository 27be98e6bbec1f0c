"$MPRESS" topo import "$SRC/tests/data/topologies/v100x8-cubemesh.nvidia-smi.txt" -o smi.json && "$MPRESS" topo show smi.json

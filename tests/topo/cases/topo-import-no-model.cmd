"$MPRESS" topo import "$SRC/tests/topo/data/pcie4.smi.txt"

cp "$SRC/tests/topo/data/pcie4.smi.txt" in.txt && "$MPRESS" topo import in.txt --gpu a100-80g -o ./in.txt; rc=$?; cmp -s in.txt "$SRC/tests/topo/data/pcie4.smi.txt" && echo unchanged; exit $rc

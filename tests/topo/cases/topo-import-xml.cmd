"$MPRESS" topo import "$SRC/tests/data/topologies/dgx1-v100.nccl.xml"

"$MPRESS" topo import "$SRC/tests/topo/data/bad-unclosed.nccl.xml"

"$MPRESS" topo show "$SRC/tests/topo/data/perm4.nccl.xml"

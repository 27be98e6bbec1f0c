"$MPRESS" topo import "$SHARED/data/topologies/dgx1-v100.nccl.xml"

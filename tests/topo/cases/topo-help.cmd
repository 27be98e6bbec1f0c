"$MPRESS" topo --help

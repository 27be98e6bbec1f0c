"$MPRESS" topo list

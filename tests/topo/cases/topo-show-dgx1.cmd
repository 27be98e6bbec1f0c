"$MPRESS" topo show dgx1

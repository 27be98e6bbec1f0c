"$MPRESS" topo show dgx9

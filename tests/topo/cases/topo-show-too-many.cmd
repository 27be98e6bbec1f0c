"$MPRESS" topo show dgx1 --gpus 9

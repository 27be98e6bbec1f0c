"$MPRESS" topo show dgx2 --gpus 4

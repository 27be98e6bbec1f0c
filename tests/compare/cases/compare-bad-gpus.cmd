"$MPRESS" compare --gpus 0

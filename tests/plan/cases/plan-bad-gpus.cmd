"$MPRESS" plan --gpus 0

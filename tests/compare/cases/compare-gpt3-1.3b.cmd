"$MPRESS" compare "$SRC/profiles/gpt3-1.3b.v100.json" --topology dgx1-16g --gpus 4 --micro-batches 8

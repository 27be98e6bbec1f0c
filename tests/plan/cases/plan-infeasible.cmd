"$MPRESS" plan "$SRC/profiles/gpt3-13b.v100.json" --topology dgx1 --gpus 2 -o p.json; echo "rc $?"; ls

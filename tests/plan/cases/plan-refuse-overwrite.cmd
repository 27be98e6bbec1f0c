echo "{}" > x.json && "$MPRESS" plan --topology dgx-a100 -o x.json; echo "rc $?"; cat x.json

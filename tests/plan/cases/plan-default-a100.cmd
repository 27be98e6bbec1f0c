"$MPRESS" plan --topology dgx-a100 -o p.json | sed "s/solved in [0-9.]* s/solved in N s/" && "$MPRESS" validate p.json

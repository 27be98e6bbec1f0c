"$MPRESS" run plan.json --backend cuda

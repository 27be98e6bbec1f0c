"$MPRESS" run plan.json --backend tpu

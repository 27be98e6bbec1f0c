"$MPRESS" run plan.json --backend host

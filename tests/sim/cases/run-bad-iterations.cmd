"$MPRESS" run plan.json --iterations 0

"$MPRESS" run plan.json --frobnicate

"$MPRESS" profile --analytic --model gpt-tiny

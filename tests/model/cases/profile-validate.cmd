"$MPRESS" profile --model gpt3-6.7b --gpu a100-80g -o p.json && "$MPRESS" validate p.json

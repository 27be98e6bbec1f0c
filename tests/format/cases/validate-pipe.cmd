"$MPRESS" profile --model gpt-tiny | "$MPRESS" validate /dev/stdin; echo "rc=$?"; printf '{"format": "mpress-profile", "version": 3}\n' | "$MPRESS" validate /dev/stdin

"$MPRESS" profile --events "$SRC/tests/profile/events/steps.events" --warmup 2 --dtype fp32 --

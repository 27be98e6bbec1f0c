bash "$SRC/tests/cli/plan-signals.sh" 2>/dev/null

bash "$SRC/tests/cli/stdout-full.sh"

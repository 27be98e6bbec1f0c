bash "$SRC/tests/cli/outputs.sh"

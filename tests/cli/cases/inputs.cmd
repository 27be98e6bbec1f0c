bash "$SRC/tests/cli/inputs.sh"

"$MPRESS" topo emulate --devices 2 --memory 400KiB -o t.json >/dev/null && "$MPRESS" plan "$SRC/tests/plan/data/gpt-tiny.host.json" --topology t.json --gpus 2 -o p.json; echo "rc $?"; ls

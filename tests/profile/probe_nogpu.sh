#!/usr/bin/env bash
# Without a GPU, `mpress profile --probe-bandwidth` exits 4 with a message and writes nothing.
# Skipped (77) where a GPU answers nvidia-smi. Usage: probe_nogpu.sh MPRESS
if nvidia-smi -L >/dev/null 2>&1; then
  echo "a GPU is present: skipped"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$1" profile --probe-bandwidth -o "$tmp/t.json" 2>"$tmp/err"
rc=$?
cat "$tmp/err"
[ $rc -eq 4 ] || { echo "expected exit 4, got $rc"; exit 1; }
grep -q "^mpress: profile: cannot probe bandwidths: " "$tmp/err" || { echo "no message"; exit 1; }
[ ! -e "$tmp/t.json" ] || { echo "a topology was written"; exit 1; }
echo ok

#!/usr/bin/env bash
# GPU check of `mpress profile`: builds sample.cu with nvcc, runs it under the tracer and checks
# that kernels and allocations landed in the right ops; then a crashing run. Exits 77 (skip)
# without a GPU (except STEP build, which needs no GPU).
# Usage: check.sh MPRESS OUTDIR [NVCC [STEP]]
#   STEP all (default) | build | profile | crash. NVCC '-' means: use OUTDIR/sample as it is
#   (compiled on another machine by scripts/gpu-check --prepare).
set -uo pipefail
mpress=$1
out=$2
nvcc=${3:-nvcc}
what=${4:-all}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
fail=0
step() { echo "== $*"; }
have_gpu() { nvidia-smi -L >/dev/null 2>&1; }
if [ "$what" != build ] && ! have_gpu; then
  echo "check: no GPU (nvidia-smi -L fails): skipped"
  exit 77
fi

if [ "$what" = all ] || [ "$what" = build ]; then
  if [ "$nvcc" = - ]; then
    [ -x "$out/sample" ] || { echo "FAIL no nvcc given and no $out/sample"; exit 1; }
    echo "== using the sample compiled before: $out/sample"
  else
    step "nvcc sample.cu"
    # SASS for Hopper (H100/H200) and PTX that any GPU CUDA 13 supports can compile at load
    "$nvcc" -O2 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_75,code=compute_75 \
      -o "$out/sample" "$here/sample.cu" -ldl || exit 1
  fi
  [ "$what" = build ] && exit 0
fi
[ -x "$out/sample" ] || { echo "FAIL $out/sample is missing (run STEP build first)"; exit 1; }

if [ "$what" = all ] || [ "$what" = profile ]; then
  step "mpress profile -- sample"
  "$mpress" profile --events "$out/sample.events" -o "$out/sample.json" -- "$out/sample"
  rc=$?
  echo "exit code $rc"
  [ $rc -eq 0 ] || fail=1
  if [ -f "$out/sample.json" ]; then
    python3 - "$out/sample.json" <<'PY' || fail=1
import json, sys
p = json.load(open(sys.argv[1]))
ops = {o["name"]: o for o in p["ops"]}
MiB = 1 << 20
bad = []
def want(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        bad.append(what)
want(p["source"] == "cupti", "source is cupti")
want(list(ops) == ["layer0.a", "layer0.b"], "ops are layer0.a, layer0.b in order: %s" % list(ops))
a, b = ops.get("layer0.a", {}), ops.get("layer0.b", {})
want([t["bytes"] for t in a.get("tensors", [])] == [4 * MiB], "layer0.a saves one 4 MiB tensor")
want([t["bytes"] for t in b.get("tensors", [])] == [8 * MiB], "layer0.b saves one 8 MiB tensor")
want(a.get("workspace_bytes") == 1 * MiB, "layer0.a workspace 1 MiB: %s" % a.get("workspace_bytes"))
want(a.get("param_bytes") == 2 * MiB, "layer0.a params 2 MiB: %s" % a.get("param_bytes"))
want(b.get("grad_bytes") == 512 * 1024, "layer0.b grads 512 KiB: %s" % b.get("grad_bytes"))
fa, fb = a.get("fwd_s", 0), b.get("fwd_s", 0)
want(fa > 0 and fb > 0, "forward times measured: %.3g s, %.3g s" % (fa, fb))
want(fb > 2 * fa, "layer0.b forward (4x the spin) is over twice layer0.a's")
want(a.get("bwd_s", 0) > 0 and b.get("bwd_s", 0) > 0, "backward times measured")
print("device:", p["device"])
sys.exit(1 if bad else 0)
PY
  else
    echo "FAIL no profile written"
    fail=1
  fi
fi

if [ "$what" = all ] || [ "$what" = crash ]; then
  step "mpress profile -- sample crash (the trace must survive the abort)"
  "$mpress" profile --events "$out/crash.events" -o "$out/crash.json" -- "$out/sample" crash
  rc=$?
  echo "exit code $rc (4 expected: the program was killed)"
  [ $rc -eq 4 ] || fail=1
  if [ -f "$out/crash.json" ]; then
    python3 -c "
import json, sys
p = json.load(open('$out/crash.json'))
names = [o['name'] for o in p['ops']]
print('ops after the crash:', names)
sys.exit(0 if names == ['layer0.a', 'layer0.b'] else 1)" || fail=1
  else
    echo "FAIL no profile from the crashed run"
    fail=1
  fi
fi
[ $fail -eq 0 ] && echo "check: all passed" || echo "check: FAILED"
exit $fail

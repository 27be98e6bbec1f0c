#!/usr/bin/env python3
"""Every golden plan (plans/*.json) simulates without running out of memory: `mpress run PLAN`
exits 0, except the plans listed in known-oom.txt beside this script, which must exit 1 (out
of memory) until the planner's model is fixed (strict: a listed plan that fits fails too). The trace and SVG of the default plan (the first golden whose name says gpt3-6.7b,
else the first golden) pass the same schema and XML checks as check_outputs.py. Skips (77)
while plans/ holds none. usage: check_goldens.py MPRESS SRCDIR"""
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_outputs  # noqa: E402


def main():
    mpress, src = sys.argv[1], sys.argv[2]
    plans = sorted(glob.glob(os.path.join(src, "plans", "*.json")))
    if not plans:
        print("skipped: no golden plans in plans/")
        return 77
    here = os.path.dirname(os.path.abspath(__file__))
    known = set()
    for line in open(os.path.join(here, "known-oom.txt")):
        line = line.split("#")[0].strip()
        if line:
            known.add(line)
    bad = fits = 0
    for p in plans:
        name = os.path.basename(p)[:-len(".json")]
        r = subprocess.run([mpress, "run", p, "--iterations", "2"], capture_output=True,
                           text=True)
        want = 1 if name in known else 0
        ok = r.returncode == want
        fits += r.returncode == 0
        tag = "ok  " if ok else "FAIL"
        print("%s %s%s" % (tag, os.path.relpath(p, src),
                           " (known out of memory)" if want and ok else ""))
        if not ok:
            bad += 1
            print(r.stderr.strip() if r.returncode else
                  "fits now: take %s off tests/sim/known-oom.txt" % name)
    print("%d of %d golden plans simulate without running out of memory (%d known not to)" %
          (fits, len(plans), len(known)))
    default = next((p for p in plans if "gpt3-6.7b" in os.path.basename(p)), plans[0])
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([mpress, "run", default, "--iterations", "1", "--trace",
                            tmp + "/t.json", "--svg", tmp + "/m.svg"], capture_output=True)
        n_gpus = len(json.load(open(default))["topology"]["gpus"])
        if os.path.exists(tmp + "/t.json"):
            check_outputs.check_trace(tmp + "/t.json", n_gpus, required=("forward", "backward",
                                                                         "optimizer"))
            check_outputs.check_svg(tmp + "/m.svg", n_gpus)
        else:
            check_outputs.check(False, "trace of %s written (exit %d)" % (default, r.returncode))
    print("%s: trace and SVG checked, %d failures" % (os.path.relpath(default, src),
                                                     check_outputs.failures))
    return 1 if bad or check_outputs.failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Every golden plan (plans/*.json) simulates without running out of memory: `mpress run PLAN`
exits 0 for each. The goldens together exercise both swap kinds: at least one plan host-swaps
a saved tensor and at least one D2D-swaps one. The trace and SVG of the default plan (the
first golden whose name says gpt3-6.7b, else the first golden) pass the same schema and XML
checks as check_outputs.py. Skips (77) while plans/ holds none.
usage: check_goldens.py MPRESS SRCDIR"""
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
    bad = fits = 0
    kinds = set()
    for p in plans:
        kinds.update(a["action"] for a in json.load(open(p))["actions"])
        r = subprocess.run([mpress, "run", p, "--iterations", "2"], capture_output=True,
                           text=True)
        ok = r.returncode == 0
        fits += ok
        print("%s %s" % ("ok  " if ok else "FAIL", os.path.relpath(p, src)))
        if not ok:
            bad += 1
            print(r.stderr.strip())
    print("%d of %d golden plans simulate without running out of memory" % (fits, len(plans)))
    for kind in ("host_swap", "d2d_swap"):
        if kind not in kinds:
            bad += 1
            print("FAIL no golden plan has a %s action (plans/cases.txt should include one)" %
                  kind)
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

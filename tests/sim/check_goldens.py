#!/usr/bin/env python3
"""Every golden plan (plans/*.json) simulates without running out of memory: `mpress run PLAN`
exits 0. Skips (77) while plans/ holds none. usage: check_goldens.py MPRESS SRCDIR"""
import glob
import os
import subprocess
import sys


def main():
    mpress, src = sys.argv[1], sys.argv[2]
    plans = sorted(glob.glob(os.path.join(src, "plans", "*.json")))
    if not plans:
        print("skipped: no golden plans in plans/")
        return 77
    bad = 0
    for p in plans:
        r = subprocess.run([mpress, "run", p, "--iterations", "2"], capture_output=True,
                           text=True)
        ok = r.returncode == 0
        print("%s %s" % ("ok  " if ok else "FAIL", os.path.relpath(p, src)))
        if not ok:
            bad += 1
            print(r.stderr.strip())
    print("%d of %d golden plans simulate without running out of memory" %
          (len(plans) - bad, len(plans)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Re-plans one golden case of plans/cases.txt and compares the plan byte for byte with
plans/NAME.json, then runs `mpress validate` on the golden file.
Usage: golden.py MPRESS SRCDIR NAME. Regenerate on purpose with scripts/regen-plans."""
import os
import subprocess
import sys
import tempfile


def main():
    mpress, src, name = sys.argv[1:4]
    for line in open(os.path.join(src, "plans", "cases.txt")):
        f = line.split()
        if f and not line.startswith("#") and f[0] == name:
            profile, args = f[1], f[2:]
            break
    else:
        print("no case", name)
        return 1
    golden = os.path.join(src, "plans", name + ".json")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "plan.json")
        p = subprocess.run([mpress, "plan", os.path.join(src, profile)] + args + ["-o", out],
                           capture_output=True, text=True)
        if p.returncode != 0:
            print("mpress plan failed (%d):\n%s" % (p.returncode, p.stderr))
            return 1
        got, want = open(out, "rb").read(), open(golden, "rb").read()
        if got != want:
            a, b = want.decode().splitlines(), got.decode().splitlines()
            diff = [i for i in range(min(len(a), len(b))) if a[i] != b[i]]
            first = diff[0] if diff else min(len(a), len(b))
            print("plan differs from %s at line %d:\n- %s\n+ %s" %
                  (golden, first + 1, a[first] if first < len(a) else "(end)",
                   b[first] if first < len(b) else "(end)"))
            return 1
    v = subprocess.run([mpress, "validate", golden], capture_output=True, text=True)
    if v.returncode != 0:
        print("mpress validate failed:\n" + v.stdout + v.stderr)
        return 1
    print(p.stdout.splitlines()[1] if p.stdout else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs one CLI case (CASE.cmd) and compares stdout, stderr and exit code with CASE.out,
CASE.err and CASE.rc. Sample data the cases read is in tests/data ($SRC/tests/data). MPRESS_REGEN=1 rewrites the
expected files instead. In expected text, the temporary folder appears as $TMP and the source
root as $SRC."""
import os
import shutil
import subprocess
import sys
import tempfile


def main():
    case = sys.argv[1]
    with open(case + ".cmd") as f:
        cmd = f.read().strip()
    src = os.environ["SRC"]
    tmp = tempfile.mkdtemp(prefix="mpress-cli-")
    env = dict(os.environ)
    env["TMP"] = tmp
    env["LC_ALL"] = "C"
    try:
        p = subprocess.run(["bash", "-c", cmd], capture_output=True, env=env, cwd=tmp,
                           timeout=300)
        def norm(b):
            t = b.decode("utf-8", "replace")
            return t.replace(tmp, "$TMP").replace(src, "$SRC")
        got = {"out": norm(p.stdout), "err": norm(p.stderr), "rc": "%d\n" % p.returncode}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if os.environ.get("MPRESS_REGEN"):
        for k, v in got.items():
            with open(case + "." + k, "w") as f:
                f.write(v)
        print("regenerated", case)
        return 0
    bad = 0
    for k, v in got.items():
        path = case + "." + k
        want = open(path).read() if os.path.exists(path) else ""
        if want != v:
            bad += 1
            print("--- %s differs\n--- expected:\n%s--- got:\n%s" % (path, want, v))
    print("command:", cmd)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

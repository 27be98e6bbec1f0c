#!/usr/bin/env python3
"""Runs `mpress run` on fixture plans and checks what it writes: the trace against the Chrome
trace event schema (required keys and types per event, metadata naming every track used, no
overlapping spans on one serial track), the SVG as well-formed XML with one memory line per
GPU, the report's format and consistency, byte-identical output on a second run, and the out of
memory exit. usage: check_outputs.py MPRESS MAKE_PLAN"""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        if failures <= 20:
            print("FAIL:", what)


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_trace(path, n_gpus, required=("forward", "backward", "optimizer", "send_act",
                                       "send_grad", "evict", "prefetch", "recompute")):
    t = json.load(open(path))
    check(isinstance(t, dict) and isinstance(t.get("traceEvents"), list), "traceEvents list")
    evs = t["traceEvents"]
    procs, threads, spans, cats = set(), set(), {}, set()
    for i, e in enumerate(evs):
        where = "traceEvents[%d]" % i
        if not isinstance(e, dict) or not isinstance(e.get("ph"), str):
            check(False, where + ": object with a string ph")
            continue
        ph = e["ph"]
        check(isinstance(e.get("name"), str) and e["name"], where + ": name string")
        check(isinstance(e.get("pid"), int), where + ": integer pid")
        if ph == "X":
            for k in ("ts", "dur"):
                check(is_num(e.get(k)) and e[k] >= 0, where + ": %s >= 0" % k)
            check(isinstance(e.get("tid"), int), where + ": integer tid")
            check(isinstance(e.get("cat"), str), where + ": cat string")
            check(isinstance(e.get("args"), dict), where + ": args object")
            cats.add(e.get("cat"))
            spans.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"],
                                                              e["name"]))
        elif ph == "M":
            check(e["name"] in ("process_name", "thread_name", "process_sort_index"),
                  where + ": metadata name")
            check(isinstance(e.get("tid"), int), where + ": integer tid")
            if e["name"] != "process_sort_index":
                check(isinstance(e.get("args", {}).get("name"), str), where + ": args.name")
            (procs if e["name"] == "process_name" else threads).add(
                e["pid"] if e["name"] == "process_name" else (e["pid"], e["tid"]))
        elif ph == "C":
            check(is_num(e.get("ts")), where + ": numeric ts")
            args = e.get("args")
            check(isinstance(args, dict) and args and all(is_num(v) for v in args.values()),
                  where + ": numeric counter args")
        else:
            check(False, where + ": unexpected ph %r" % ph)
    for key, lst in spans.items():
        check(key[0] in procs, "pid %d has a process_name" % key[0])
        check(key in threads, "track %r has a thread_name" % (key,))
        lst.sort()
        for a, b in zip(lst, lst[1:]):
            # one compute stream or copy engine runs one thing at a time (times are printed
            # in µs with 3 decimals, hence the slack of one last digit)
            check(b[0] >= a[1] - 1.5e-3, "overlap on track %r: %s and %s" % (key, a[2], b[2]))
    for c in required:
        check(c in cats, "trace has %s events" % c)
    check(set(range(n_gpus)) <= procs, "a process per GPU")


def check_svg(path, n_gpus):
    root = ET.parse(path).getroot()
    check(root.tag == "{http://www.w3.org/2000/svg}svg", "svg root element")
    lines = root.findall("{http://www.w3.org/2000/svg}polyline")
    check(len(lines) == n_gpus, "one memory line per GPU (%d, want %d)" % (len(lines), n_gpus))
    bars = root.findall("{http://www.w3.org/2000/svg}rect")
    check(len(bars) > n_gpus, "stacked bars")


def check_report(path, n_gpus):
    r = json.load(open(path))
    check(r.get("format") == "mpress-sim-report" and r.get("version") == 1, "report header")
    check(len(r["gpus"]) == n_gpus, "report gpus")
    for g in r["gpus"]:
        check(sum(g["at_peak"].values()) == g["peak"]["simulated"],
              "gpu %d breakdown sums to its peak" % g["gpu"])
        check(g["peak"]["simulated"] <= g["capacity"], "gpu %d fits" % g["gpu"])
    check(r["iteration_s"]["simulated"] > 0, "iteration time")
    check(r["out_of_memory"] is None, "no out of memory")


def main():
    mpress, make_plan = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="mpress-sim-")
    plan = os.path.join(tmp, "plan.json")
    subprocess.run([make_plan, plan, "gpt3-1.3b", "dgx1", "4", "8", "1f1b", "mix"], check=True)
    outs = []
    for run in range(2):
        d = os.path.join(tmp, "run%d" % run)
        os.mkdir(d)
        p = subprocess.run([mpress, "run", plan, "--iterations", "2", "--report", d + "/r.json",
                            "--trace", d + "/t.json", "--svg", d + "/m.svg"],
                           capture_output=True, text=True)
        check(p.returncode == 0, "run exits 0 (got %d: %s)" % (p.returncode, p.stderr))
        outs.append((p.stdout, [open(d + f, "rb").read() for f in ("/r.json", "/t.json",
                                                                     "/m.svg")]))
    check(outs[0] == outs[1], "two runs write identical bytes")
    d = os.path.join(tmp, "run0")
    check_trace(d + "/t.json", 4)
    check_svg(d + "/m.svg", 4)
    check_report(d + "/r.json", 4)

    # Out of memory: exit 1, GPU, time and residents named, the files still written.
    big = os.path.join(tmp, "big.json")
    subprocess.run([make_plan, big, "gpt3-6.7b", "dgx1", "8", "16", "1f1b", "none"], check=True)
    p = subprocess.run([mpress, "run", big, "--iterations", "1", "--report", tmp + "/big-r.json"],
                       capture_output=True, text=True)
    check(p.returncode == 1, "out of memory exits 1 (got %d)" % p.returncode)
    check(p.stderr.startswith("mpress: run: '%s' does not fit: out of memory on gpu 0 at " % big),
          "out of memory message: " + p.stderr)
    check("largest residents at the peak: " in p.stderr, "residents named")
    r = json.load(open(tmp + "/big-r.json"))
    check(r["out_of_memory"]["gpu"] == 0, "report names the GPU")
    print("%d failures" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Edits the topology embedded in a plan and writes the plan with its topology_hash updated, so
that `mpress run` loads it (the loader refuses a hash that does not match: docs/formats.md);
a GPU's memory is changed in the plan's `gpus` entry for it too.

usage: edit_topology.py PLAN OUT [gpu0.memory_bytes=N] [pcie_bytes_per_s=X] [uplinks=X]

The hash is FNV-1a 64 of the topology as mpress writes it (keys sorted, two-space indent,
reals as jansson prints them at 10 digits, a final newline). The script first checks that it
reproduces the plan's own hash that way, and exits 1 if not, rather than write a plan the
loader would refuse for another reason."""
import json
import re
import sys


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def real(x):
    s = "%.10g" % x
    if "." not in s and "e" not in s:
        s += ".0"
    return re.sub(r"e\+?(-?)0*(\d)", r"e\1\2", s)


def dump(v, depth=0):
    pad = "  " * (depth + 1)
    if isinstance(v, dict):
        if not v:
            return "{}"
        items = (pad + json.dumps(k, ensure_ascii=False) + ": " + dump(v[k], depth + 1)
                 for k in sorted(v))
        return "{\n" + ",\n".join(items) + "\n" + "  " * depth + "}"
    if isinstance(v, list):
        if not v:
            return "[]"
        return "[\n" + ",\n".join(pad + dump(x, depth + 1) for x in v) + "\n" + "  " * depth + "]"
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, float):
        return real(v)
    return json.dumps(v, ensure_ascii=False)


def topo_hash(t):
    return fnv1a64((dump(t) + "\n").encode("utf-8"))


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        plan = json.load(f)
    t = plan["topology"]
    if topo_hash(t) != plan["topology_hash"]:
        print("edit_topology.py: cannot reproduce %s's topology_hash" % sys.argv[1],
              file=sys.stderr)
        return 1
    for arg in sys.argv[3:]:
        key, value = arg.split("=", 1)
        if key == "gpu0.memory_bytes":
            t["gpus"][0]["memory_bytes"] = int(value)
            for g in plan["gpus"]:  # the plan's own copy of each GPU's capacity
                if g["gpu"] == 0:
                    g["capacity_bytes"] = int(value)
        elif key == "pcie_bytes_per_s":
            t["pcie_bytes_per_s"] = float(value)
        elif key == "uplinks":
            for s in t["pcie_switches"]:
                s["uplink_bytes_per_s"] = float(value)
        else:
            print("edit_topology.py: unknown field %s" % key, file=sys.stderr)
            return 2
    plan["topology_hash"] = topo_hash(t)
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(plan, f, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

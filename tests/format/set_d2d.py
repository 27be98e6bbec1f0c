#!/usr/bin/env python3
"""set_d2d.py PLAN FROM TO OUT: copies the mpress plan PLAN to OUT with the first saved tensor
of the stage on GPU FROM turned into a D2D swap of all its bytes to GPU TO (eviction and
prefetch at its own op), everything else unchanged. Prints the action's index."""
import json
import sys


def main():
    src, g_from, g_to, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    with open(src) as f:
        plan = json.load(f)
    stage = next(s for s in plan["stages"] if s["gpu"] == g_from)
    ops = plan["profile"]["ops"]
    j = next(i for i, a in enumerate(plan["actions"]) if a["op"] >= stage["first_op"])
    a = plan["actions"][j]
    tensor = next(t for t in ops[a["op"]]["tensors"] if t["id"] == a["tensor"])
    a["action"] = "d2d_swap"
    a["peers"] = [{"gpu": g_to, "bytes": tensor["bytes"]}]
    a["evict_after_op"] = a["prefetch_before_op"] = a["op"]
    with open(out, "w") as f:
        json.dump(plan, f, indent=2, sort_keys=True)
        f.write("\n")
    print(j)


if __name__ == "__main__":
    main()

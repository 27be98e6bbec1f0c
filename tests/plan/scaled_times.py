#!/usr/bin/env python3
"""gpt-tiny with every op and recompute time multiplied by FACTOR (1e12: ops of 1e6 s and
more, where GLPK's simplex on the scaled root relaxation cycled without end) plans on 8 GPUs
of dgx1: exit 0 with a plan no slower than the fastest baseline that fits (both from the plan
file), within the test's timeout.

usage: scaled_times.py MPRESS SRCDIR FACTOR"""
import json
import os
import subprocess
import sys
import tempfile


def main():
    mpress, src, factor = sys.argv[1], sys.argv[2], float(sys.argv[3])
    d = json.load(open(os.path.join(src, 'profiles', 'gpt-tiny.v100.json')))
    for op in d['ops']:
        op['fwd_s'] *= factor
        op['bwd_s'] *= factor
        for t in op.get('tensors', []):
            t['recompute_s'] *= factor
    with tempfile.TemporaryDirectory() as tmp:
        prof = os.path.join(tmp, 'p.json')
        with open(prof, 'w') as f:
            json.dump(d, f)
        plan = os.path.join(tmp, 'plan.json')
        r = subprocess.run([mpress, 'plan', prof, '--gpus', '8', '-o', plan],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print('FAIL: exit %d: %s' % (r.returncode, r.stderr.strip()))
            return 1
        pl = json.load(open(plan))
        best = min(b['iteration_s'] for b in pl['baselines'] if b['fits'])
        print('%s, %.10g s (best baseline %.10g s)' % (pl['solver']['status'],
                                                       pl['iteration_s'], best))
        return 0 if pl['iteration_s'] <= best * (1 + 1e-9) else 1


if __name__ == '__main__':
    sys.exit(main())

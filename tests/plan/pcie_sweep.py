#!/usr/bin/env python3
"""PCIe bandwidth sweep: the DGX-1 imported from the shipped NCCL dump, gpt-tiny on 8 GPUs,
pcie_bytes_per_s set to each value given. Every point must plan (exit 0) with a plan that is
no slower than the fastest baseline that fits (both read from the plan file, the baselines
evaluated by the same cost model), and planning the first point twice must give the same
file byte for byte.

usage: pcie_sweep.py MPRESS SRCDIR BW...   (BW in bytes/s, or LO:HI:STEP)"""
import json
import os
import subprocess
import sys
import tempfile


def values(args):
    out = []
    for a in args:
        if ':' in a:
            lo, hi, step = (float(x) for x in a.split(':'))
            v = lo
            while v <= hi * (1 + 1e-12):
                out.append(v)
                v += step
        else:
            out.append(float(a))
    return out


def main():
    mpress, src = sys.argv[1], sys.argv[2]
    bws = values(sys.argv[3:])
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, 'dgx1.json')
        subprocess.run([mpress, 'topo', 'import',
                        os.path.join(src, 'tests', 'data', 'topologies', 'dgx1-v100.nccl.xml'),
                        '-o', base], check=True, capture_output=True)
        topo = json.load(open(base))
        first = None
        for i, bw in enumerate(bws):
            topo['pcie_bytes_per_s'] = bw
            tpath = os.path.join(tmp, 'topo.json')
            with open(tpath, 'w') as f:
                json.dump(topo, f)
            plan = os.path.join(tmp, 'plan%d.json' % i)
            r = subprocess.run([mpress, 'plan', os.path.join(src, 'profiles', 'gpt-tiny.v100.json'),
                                '--topology', tpath, '--gpus', '8', '-o', plan],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print('FAIL pcie %g: exit %d: %s' % (bw, r.returncode, r.stderr.strip()))
                failed += 1
                continue
            d = json.load(open(plan))
            fit = [b['iteration_s'] for b in d['baselines'] if b['fits']]
            best = min(fit) if fit else None
            ok = best is None or d['iteration_s'] <= best * (1 + 1e-9)
            print('%s pcie %g: %s, %.6g s (best baseline %s)%s' %
                  ('ok  ' if ok else 'FAIL', bw, d['solver']['status'], d['iteration_s'],
                   '%.6g s' % best if best else 'none', ' ' + r.stderr.strip() if r.stderr else ''))
            failed += not ok
            if i == 0:
                first = (tpath + '.0', plan)
                os.rename(tpath, first[0])
        if first:
            again = os.path.join(tmp, 'again.json')
            subprocess.run([mpress, 'plan', os.path.join(src, 'profiles', 'gpt-tiny.v100.json'),
                            '--topology', first[0], '--gpus', '8', '-o', again],
                           check=True, capture_output=True)
            if open(again, 'rb').read() != open(first[1], 'rb').read():
                print('FAIL pcie %g: planning twice gave different files' % bws[0])
                failed += 1
    print('%d of %d failed' % (failed, len(bws)))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())

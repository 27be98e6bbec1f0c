#!/usr/bin/env python3
"""Rates of a topology outside their supported ranges (docs/formats.md, "Limits": bandwidths
1e6..1e15 B/s, FLOP/s 1e6..1e18, 0 where a field allows it) are refused at load: `mpress
validate` and `mpress plan` exit 3 naming the file and the JSON path of the value. The range's
ends themselves load. With PLAN given, gpt-tiny is also planned on 8 GPUs at each end of each
bandwidth: the answer is a plan (exit 0) or a proof that nothing fits (exit 1), never exit 4.

usage: rate_limits.py MPRESS SRCDIR [PLAN]"""
import json
import os
import subprocess
import sys
import tempfile

# field -> (where, kind); where: 'top', 'gpus' or 'pcie_switches'
FIELDS = {
    'pcie_bytes_per_s': ('top', 'bw'),
    'nvlink_bytes_per_s': ('top', 'bw'),
    'socket_link_bytes_per_s': ('top', 'bw'),
    'host_memory_bytes_per_s': ('top', 'bw'),
    'cpu_flops': ('top', 'flops'),
    'uplink_bytes_per_s': ('pcie_switches', 'bw'),
    'hbm_bytes_per_s': ('gpus', 'bw'),
    'flops_fp16': ('gpus', 'flops'),
    'flops_fp32': ('gpus', 'flops'),
}
RANGE = {'bw': (1e6, 1e15), 'flops': (1e6, 1e18)}


def with_value(topo, field, v, last):
    d = json.loads(json.dumps(topo))
    where = FIELDS[field][0]
    if where == 'top':
        d[field] = v
        return d, field
    i = len(d[where]) - 1 if last else 0
    d[where][i][field] = v
    return d, '%s[%d].%s' % (where, i, field)


def main():
    mpress, src = sys.argv[1], sys.argv[2]
    do_plan = len(sys.argv) > 3 and sys.argv[3] == 'PLAN'
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, 'dgx1.json')
        subprocess.run([mpress, 'topo', 'import',
                        os.path.join(src, 'tests', 'data', 'topologies', 'dgx1-v100.nccl.xml'),
                        '-o', base], check=True, capture_output=True)
        topo = json.load(open(base))
        path = os.path.join(tmp, 't.json')
        profile = os.path.join(src, 'profiles', 'gpt-tiny.v100.json')
        for field, (_, kind) in sorted(FIELDS.items()):
            lo, hi = RANGE[kind]
            for n, v in enumerate((1e308, 1e-300, hi * 1.0001, lo * 0.9999)):
                d, jpath = with_value(topo, field, v, n % 2 == 1)
                with open(path, 'w') as f:
                    json.dump(d, f)
                for cmd in (['validate', path],
                            ['plan', profile, '--topology', path, '-o', '-']):
                    r = subprocess.run([mpress] + cmd, capture_output=True, text=True)
                    ok = (r.returncode == 3 and r.stdout == '' and
                          (path + ':') in r.stderr and (': ' + jpath + ': ') in r.stderr and
                          'outside the supported range' in r.stderr)
                    if not ok:
                        print('FAIL %s = %g, %s: exit %d: %s' %
                              (jpath, v, cmd[0], r.returncode, r.stderr.strip()))
                        failed += 1
            for v in (lo, hi):
                d, jpath = with_value(topo, field, v, False)
                with open(path, 'w') as f:
                    json.dump(d, f)
                r = subprocess.run([mpress, 'validate', path], capture_output=True, text=True)
                if r.returncode != 0:
                    print('FAIL %s = %g (the range\'s end) refused: %s' % (jpath, v,
                                                                           r.stderr.strip()))
                    failed += 1
                if do_plan and kind == 'bw':
                    r = subprocess.run([mpress, 'plan', profile, '--topology', path, '--gpus',
                                        '8', '-o', os.path.join(tmp, 'plan.json')],
                                       capture_output=True, text=True)
                    print('%s %s = %g: plan exit %d %s' % ('ok  ' if r.returncode in (0, 1)
                                                           else 'FAIL', jpath, v, r.returncode,
                                                           r.stderr.strip()[-200:]))
                    failed += r.returncode not in (0, 1)
    print('%d failed' % failed)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""No file of libmpress or of the mpress executable names another folder's header by path.

Usage: check_includes.py SOURCE_ROOT [STAMP]

Each lib/ folder is compiled with only the public headers, config.h, its own folder and the
folders its meson.build lists in mpress_needs on the include path (lib/meson.build), so
`#include "other_internal.h"` does not build. A quoted include with a directory in it is found
relative to the including file as well, which the include path cannot forbid; this check refuses
every quoted include that has a '/' in it other than "mpress/..." in lib/*/ and cmd/ (which sees
only the public headers), printing FILE:LINE for each.
Exit 0 (writing STAMP when given) or 1.
"""
import glob
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    root = sys.argv[1]
    lib = os.path.join(root, 'lib')
    bad = []
    files = sorted(f for pat in ('lib/*/*.c', 'lib/*/*.h', 'lib/*/*.in', 'cmd/*.c', 'cmd/*.h')
                   for f in glob.glob(os.path.join(root, pat))
                   if not f.startswith(os.path.join(lib, 'include') + os.sep))
    for f in files:
        with open(f, encoding='utf-8') as fh:
            for no, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if m and '/' in m.group(1) and not m.group(1).startswith('mpress/'):
                    rel = os.path.relpath(f, root)
                    bad.append(f'{rel}:{no}: #include "{m.group(1)}": include a header of the '
                               'own folder by its bare name; another folder\'s internal header '
                               'only after naming that folder in mpress_needs in this folder\'s '
                               'meson.build (with the reason), public ones as "mpress/..."')
    for b in bad:
        print(b)
    if bad:
        return 1
    if not files:
        print(f'no sources under {root}')
        return 1
    if len(sys.argv) == 3:
        with open(sys.argv[2], 'w') as fh:
            fh.write(f'{len(files)} files checked\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())

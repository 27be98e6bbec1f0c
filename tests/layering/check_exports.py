#!/usr/bin/env python3
"""libmpress.so exports exactly the public API.

Usage: check_exports.py NM LIBMPRESS_SO INCLUDE_DIR

Fails (exit 1, one line per problem, naming the symbol) when `nm -D --defined-only` of the
library shows a symbol that does not start with mpress_ (an internal function that escaped), or
when a function declared in INCLUDE_DIR/mpress/*.h is not exported (its declaration lacks
MPRESS_API, see mpress/export.h, or nothing defines it).
"""
import glob
import os
import re
import subprocess
import sys

# Defined by the linker in every shared object on some toolchains; not code of ours.
LINKER_SYMBOLS = {'_init', '_fini', '_edata', '_end', '__bss_start'}


def exported(nm, lib):
    out = subprocess.run([nm, '-D', '--defined-only', lib], check=True, capture_output=True,
                         text=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            names.add(parts[-1].split('@')[0])
    return names


def declared(include_dir):
    """Functions declared at file scope in the public headers: name -> header."""
    found = {}
    for path in sorted(glob.glob(os.path.join(include_dir, 'mpress', '*.h'))):
        text = open(path, encoding='utf-8').read()
        text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
        text = re.sub(r'//[^\n]*', ' ', text)
        # Preprocessor lines (with continuations): macros are not symbols.
        text = re.sub(r'^[ \t]*#(?:[^\n]*\\\n)*[^\n]*', ' ', text, flags=re.M)
        # extern "C" { ... } (C++ only) does not nest the declarations; its stray closing brace
        # is harmless below.
        text = re.sub(r'extern\s+"C"\s*\{', ' ', text)
        depth = 0
        stmt = []
        for tok in re.finditer(r'[{};]|[^{};]+', text):
            t = tok.group(0)
            if t == '{':
                depth += 1
            elif t == '}':
                depth = max(depth - 1, 0)
                stmt = []
            elif t == ';':
                if depth == 0:
                    s = ''.join(stmt)
                    m = re.search(r'\b(mpress_\w+)\s*\(', s)
                    if m and not re.match(r'\s*typedef\b', s) and '(*' not in s[:m.start()]:
                        found[m.group(1)] = os.path.basename(path)
                stmt = []
            elif depth == 0:
                stmt.append(t)
    return found


def main():
    if len(sys.argv) != 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    nm, lib, include_dir = sys.argv[1:]
    names = exported(nm, lib)
    decls = declared(include_dir)
    problems = []
    for n in sorted(names - LINKER_SYMBOLS):
        if not n.startswith('mpress_'):
            problems.append(f'{os.path.basename(lib)} exports internal symbol {n}: only public '
                            'declarations (mpress_ names in mpress/*.h) take MPRESS_API, and '
                            'libmpress is built with hidden visibility')
    for n, h in sorted(decls.items()):
        if n not in names:
            problems.append(f'mpress/{h} declares {n} but {os.path.basename(lib)} does not '
                            'export it: put MPRESS_API on its declaration (mpress/export.h)')
    if not decls:
        problems.append(f'no function declarations found under {include_dir}/mpress')
    for p in problems:
        print(p)
    print(f'{len(names)} exported symbols, {len(decls)} public declarations, '
          f'{len(problems)} problems')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())

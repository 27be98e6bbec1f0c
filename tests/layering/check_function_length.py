#!/usr/bin/env python3
"""No function in libmpress runs past LIMIT lines without saying why.

Usage: check_function_length.py SOURCE_ROOT [LIMIT]
       check_function_length.py --self-test

A function's length is counted from the line where its definition starts to the line of its
closing brace, both included. A function longer than LIMIT (150 unless given) lines fails the
check, printed as FILE:LINE: FUNCTION: N lines, unless the comment right above its definition
(only blank lines between) contains "long:" followed by the reason the split would hurt.

The project's style (a function's opening and closing braces alone in column 0) lets a line
scan find definitions: a '{' alone in column 0
opens a body, the lines before it up to the previous blank line, '}', ';' or comment end are
the signature, and the next '}' in column 0 closes it.
Exit 0 when every function is within the limit or explained, 1 otherwise, 2 on usage.
--self-test runs the check on small generated trees (a function of LIMIT and LIMIT + 1 lines,
with and without a reason) and exits 1 unless each outcome and message is the expected one.
"""
import glob
import os
import re
import sys

NAME = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*\(')
REASON = re.compile(r'long:\s*\S')


def comment_above(lines, start):
    """The text of the /* */ or // comment ending right above line index start ('' if none)."""
    i = start - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    if i < 0:
        return ''
    if lines[i].rstrip().endswith('*/'):
        j = i
        while j >= 0 and '/*' not in lines[j]:
            j -= 1
        return '\n'.join(lines[max(j, 0):i + 1])
    j = i
    while j >= 0 and lines[j].lstrip().startswith('//'):
        j -= 1
    return '\n'.join(lines[j + 1:i + 1])


def comment_words(text):
    """A comment's text without its delimiters (/*, */, leading * and //)."""
    text = text.replace('/*', ' ').replace('*/', ' ').replace('//', ' ')
    return '\n'.join(line.strip().lstrip('*') for line in text.split('\n'))


def functions(lines):
    """(name, first line index, length in lines) of every function definition."""
    out = []
    i = 0
    while i < len(lines):
        if lines[i].rstrip() != '{':
            i += 1
            continue
        # The signature: the lines above the brace back to a blank line or the end of the
        # previous declaration or comment.
        s = i - 1
        while s > 0:
            prev = lines[s - 1].rstrip()
            if (not prev or prev.endswith(';') or prev.endswith('}') or prev.endswith('*/')
                    or prev.lstrip().startswith('#') or prev.lstrip().startswith('//')):
                break
            s -= 1
        sig = ' '.join(lines[s:i])
        end = i + 1
        while end < len(lines) and not lines[end].startswith('}'):
            end += 1
        m = NAME.search(sig)
        if m and '=' not in sig.split('(')[0]:
            out.append((m.group(1), s, end - s + 1))
        i = end + 1
    return out


def check(root, limit):
    """The offending functions under root/lib, one message each (empty when none)."""
    files = sorted(glob.glob(os.path.join(root, 'lib', '**', '*.c'), recursive=True))
    if not files:
        return [f'no sources under {root}/lib']
    bad = []
    for f in files:
        with open(f, encoding='utf-8') as fh:
            lines = fh.read().split('\n')
        for name, start, length in functions(lines):
            if length > limit and not REASON.search(comment_words(comment_above(lines, start))):
                rel = os.path.relpath(f, root)
                bad.append(f'{rel}:{start + 1}: {name}: {length} lines (over {limit}): split it '
                           'along its steps into static functions, or say why not in the '
                           'comment above it with "long: REASON"')
    return bad


def function_text(name, lines, comment):
    """A C function of exactly `lines` lines from signature to closing brace, after comment."""
    body = [f'    x += {i};' for i in range(lines - 5)]
    return (comment + f'static int {name}(int x,\n'
            '                int y)\n{\n' + '\n'.join(body) + '\n    return x + y;\n}\n')


def self_test():
    import tempfile
    cases = [  # (comment above, length, expected to fail)
        ('/* Adds. */\n', 150, False),
        ('/* Adds. */\n', 151, True),
        ('/* Adds.\n * long: one table of cases, clearer in one piece. */\n\n', 151, False),
        ('// long: a reason in a line comment\n', 400, False),
        ('/* long: */\n', 151, True),  # the word without a reason
        ('', 151, True),
    ]
    failures = []
    for n, (comment, length, fails) in enumerate(cases):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, 'lib', 'x'))
            text = ('#include <stdio.h>\n\nstatic const int table[] = {\n    1,\n};\n\n'
                    + function_text('short_one', 10, '') + '\n'
                    + function_text('long_one', length, comment))
            with open(os.path.join(root, 'lib', 'x', 'a.c'), 'w', encoding='utf-8') as fh:
                fh.write(text)
            bad = check(root, 150)
            want = [f'lib/x/a.c:{text[:text.index("static int long_one")].count(chr(10)) + 1}: '
                    f'long_one: {length} lines'] if fails else []
            got = [b.split(' (over')[0] for b in bad]
            if got != want:
                failures.append(f'case {n}: expected {want}, got {bad}')
    for f in failures:
        print(f)
    return 1 if failures else 0


def main():
    if sys.argv[1:] == ['--self-test']:
        return self_test()
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    bad = check(sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 150)
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())

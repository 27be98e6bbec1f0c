"$MPRESS" profile --analytic --model gpt-tiny --gpu a100-80g -o p.json 2>/dev/null && "$MPRESS" plan p.json --topology "$SRC/tests/data/runtime/emu4-64m.json" --gpus 2 --micro-batches 4 --policy none -o k.json >/dev/null 2>&1 && "$MPRESS" run k.json --backend host --steps 2 --data "$SRC/tests/data/runtime/corpus.txt" --report r.json --trace t.json > out.txt 2>err.txt && python3 -c "
import json
r = json.load(open('r.json')); t = json.load(open('t.json'))
x = [e for e in t['traceEvents'] if e.get('ph') == 'X']
print('trace:', len(x), 'tasks of', ', '.join(sorted(set(e['cat'] for e in x))), '; all end after they start:', all(e['dur'] >= 0 for e in x))
print('report:', r['format'], r['backend'], r['model'], r['steps'], 'steps,', len(r['losses']), 'losses, first', '%.3f' % r['losses'][0])
for g in r['gpus']:
    m, p = g['measured_max_per_kind'], g['predicted']
    print('gpu', g['gpu'], 'stage', g['stage'], '- states and reserve as predicted:', all(m[k] == p[k] for k in ('weights', 'gradients', 'optimizer', 'reserve')), '- activations as predicted:', m['activations'] == p['activations'])
" && grep -c '^step [12]: loss' err.txt && grep -E '^(measured|host run|memory per)' out.txt | python3 -c "import re, sys; sys.stdout.write(re.sub(r'\d+\.\d{6}', lambda m: '%.3f' % float(m.group()), sys.stdin.read()))"

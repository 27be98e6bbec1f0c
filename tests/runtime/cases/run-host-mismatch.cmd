"$MPRESS" profile --analytic --model gpt-tiny --gpu a100-80g -o p.json 2>/dev/null && python3 -c "
import json; p = json.load(open('p.json'))
p['ops'][3]['tensors'][1]['bytes'] += 4
json.dump(p, open('p2.json', 'w'))" && "$MPRESS" plan p2.json --topology "$SRC/tests/data/runtime/emu4-64m.json" --gpus 2 --micro-batches 4 --policy none -o m.json >/dev/null 2>&1 && "$MPRESS" run m.json --backend host --steps 1

"$MAKE_PLAN" big.json toy dgx1 2 2 1f1b none && python3 -c 'import json,sys; d=json.load(open("big.json")); d["micro_batches"]=1431655766; json.dump(d,open("big.json","w"))' && "$MPRESS" run big.json

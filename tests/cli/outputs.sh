# Output paths that are refused (exit 2, nothing changed) and accepted.
p() { "$MPRESS" profile --analytic --model gpt-tiny "$@"; echo "exit $?"; }
p -o prof.json
ln -s prof.json link.json
p -o link.json
readlink link.json
mkdir dir.json
p -o dir.json
mkfifo fifo.json
p -o fifo.json
p -o /dev/null
echo 'my notes' >notes.txt
p -o notes.txt
cat notes.txt
p -o prof.json
"$MPRESS" plan prof.json --policy greedy -o plan.json >/dev/null; echo "plan: exit $?"
cp prof.json prof.before
"$MPRESS" plan prof.json --policy greedy --dump-lp prof.json -o plan2.json; echo "exit $?"
"$MPRESS" plan prof.json --policy greedy --dump-lp plan.json -o plan.json; echo "exit $?"
"$MPRESS" plan prof.json --policy greedy --dump-lp notes.txt -o plan2.json; echo "exit $?"
"$MPRESS" plan prof.json --policy greedy -o prof.json; echo "exit $?"
cmp prof.json prof.before && echo "prof.json unchanged"
r() { "$MPRESS" run plan.json "$@" >/dev/null; echo "exit $?"; }
r --svg notes.txt
r --trace notes.txt
r --report notes.txt
r --report plan.json
r --svg link.json
r --svg out.svg --trace out.svg
r --report r.json --trace t.json --svg s.svg
r --report r.json --trace t.json --svg s.svg
r --report t.json
r --svg r.json
cp "$SRC/tests/topo/data/pcie4.smi.txt" smi.txt
t() { "$MPRESS" topo import smi.txt --gpu a100-80g "$@"; echo "exit $?"; }
t -o smi.txt
t -o notes.txt
t -o /dev/null
t -o topo.json
t -o topo.json
cat notes.txt
ls
e() { "$MPRESS" topo emulate --devices 2 --memory 64MiB "$@"; echo "exit $?"; }
e -o link.json
e -o notes.txt
e -o prof.json
e -o em.json
cat notes.txt

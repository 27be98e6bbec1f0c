# Standard output that cannot be written: exit 4 and a message, for every command that prints.
"$MPRESS" plan --policy greedy -o p.json >/dev/null
for c in "topo show dgx1" "topo list" "validate p.json" "explain p.json" "run p.json" "help" \
         "plan --help" "--version" "profile --analytic --model gpt-tiny"; do
    $MPRESS $c >/dev/full
    echo "$c: exit $?"
done

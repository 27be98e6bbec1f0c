# SIGINT and SIGTERM during a long `mpress plan`: exit 130 and 143, the existing plan and LP
# file unchanged, and no temporary file left (the LP's is being written while the plan runs).
set -m # job control: the background job receives SIGINT as a foreground one would
for sig in INT TERM; do
    rm -rf d && mkdir d && cd d || exit 1
    "$MPRESS" plan --policy greedy -o out.json >/dev/null
    cp out.json out.before
    printf '\\* Problem: mpress_plan *\\\n' >x.lp
    cp x.lp x.before
    "$MPRESS" plan --node-limit 1000000000 --mip-gap 0 --dump-lp x.lp -o out.json \
        >/dev/null 2>err.txt &
    pid=$!
    for _ in $(seq 200); do
        ls | grep -q '\.tmp' && break
        sleep 0.05
    done
    sleep 0.5
    kill -"$sig" "$pid"
    wait "$pid"
    echo "SIG$sig: exit $?"
    cmp out.json out.before && echo "out.json unchanged"
    cmp x.lp x.before && echo "x.lp unchanged"
    ls
    cat err.txt
    cd ..
done

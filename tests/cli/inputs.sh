# Inputs that never end or never come: refused quickly with exit 3.
timeout 20 "$MPRESS" validate /dev/zero; echo "exit $?"
mkfifo fifo
timeout 20 "$MPRESS" validate fifo; echo "exit $?"
timeout 20 "$MPRESS" plan fifo; echo "exit $?"
timeout 20 "$MPRESS" profile --import pipedream fifo; echo "exit $?"
# a pipe that has a writer is read
"$MPRESS" profile --analytic --model gpt-tiny -o p.json
timeout 20 "$MPRESS" validate <(cat p.json) | sed 's/^[^:]*: //'; echo "exit ${PIPESTATUS[0]}"
# one byte past the limit (a sparse file: no disk used)
truncate -s 268435457 big.json
timeout 20 "$MPRESS" validate big.json; echo "exit $?"
# PipeDream graphs: separators that overlap, a byte that is not UTF-8
printf 'a -- -- b\n' >x.txt
"$MPRESS" profile --import pipedream x.txt; echo "exit $?"
printf 'node1 -- Lin\xffear -- forward_compute_time=1, backward_compute_time=1, activation_size=4, parameter_size=4\n' >u.txt
"$MPRESS" profile --import pipedream u.txt; echo "exit $?"

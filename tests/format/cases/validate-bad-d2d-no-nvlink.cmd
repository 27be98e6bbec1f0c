python3 $SRC/tests/format/set_d2d.py $SRC/plans/gpt3-6.7b.dgx1.json 4 1 p.json && "$MPRESS" validate p.json

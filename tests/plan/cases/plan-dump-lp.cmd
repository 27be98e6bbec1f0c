"$MPRESS" plan --topology dgx-a100 --dump-lp m.lp -o p.json >/dev/null && head -c 200 m.lp | head -3 && grep -c "^ mem_" m.lp

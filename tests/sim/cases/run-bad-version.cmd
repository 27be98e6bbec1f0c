printf '{"format": "mpress-plan",\n "version": 7}\n' > bad.json && "$MPRESS" run bad.json --report r.json; echo rc=$?; ls

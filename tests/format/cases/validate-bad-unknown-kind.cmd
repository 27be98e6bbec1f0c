printf '{"format": "mpress-report", "version": 1}\n' > r.json && "$MPRESS" validate r.json

python3 -c "print('[' * 300 + '1e547')" > deep.json && "$MPRESS" validate deep.json

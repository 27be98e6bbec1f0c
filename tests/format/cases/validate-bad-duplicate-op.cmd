sed 's/"name": "layer1.mlp"/"name": "layer0.mlp"/' $SRC/tests/format/data/profile.json > p.json && "$MPRESS" validate p.json

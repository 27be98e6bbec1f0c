"$MPRESS" validate --strict x.json

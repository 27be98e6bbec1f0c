cd $SRC/tests/format/data && "$MPRESS" validate profile.json

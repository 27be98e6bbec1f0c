"$MPRESS" profile --list-models

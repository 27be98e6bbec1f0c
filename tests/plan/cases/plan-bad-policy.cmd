"$MPRESS" plan --policy magic

"$MPRESS" compare --micro-batches 65537

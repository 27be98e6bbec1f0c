"$MPRESS" help help | head -1; "$MPRESS" help validate | head -1

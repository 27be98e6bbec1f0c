"$MPRESS" --version >/dev/null

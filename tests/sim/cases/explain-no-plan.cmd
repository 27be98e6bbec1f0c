"$MPRESS" explain

printf '{"format":"mpress-events","version":1}\n{"ev":"push","id":1,"parent":0,"t":1,"name":"other"}\n' > "$TMP/x.events"; "$MPRESS" profile --events "$TMP/x.events" --

printf '{"format":"mpress-events","version":9}\n' > "$TMP/x.events"; "$MPRESS" profile --events "$TMP/x.events" -o "$TMP/p.json" --; echo "exit $?"; test -e "$TMP/p.json" || echo "no profile written"

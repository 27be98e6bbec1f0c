"$MPRESS" profile --import pipedream "$SRC/tests/data/pipedream/gnmt.graph.txt"

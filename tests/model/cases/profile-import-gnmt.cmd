"$MPRESS" profile --import pipedream "$SHARED/data/pipedream/gnmt.graph.txt"

"$MPRESS" topo import "$SRC/tests/topo/data/bad-columns.smi.txt" -o out.json; rc=$?; ls; exit $rc

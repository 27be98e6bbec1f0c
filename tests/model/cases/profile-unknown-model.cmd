"$MPRESS" profile --analytic --model no-such-model -o out.json; rc=$?; ls; exit $rc

"$MPRESS" topo show --colour dgx1; echo "rc=$?"; "$MPRESS" topo show dgx1 --gpus; echo "rc=$?"; "$MPRESS" topo import -o; echo "rc=$?"; "$MPRESS" topo import -q x.txt

#!/usr/bin/env bash
# Golden: the shipped profiles/ regenerate byte for byte with this build (scripts/gen-profiles
# into a temporary folder, then a byte comparison). After an intended change of the model or
# the time model: scripts/gen-profiles, review the diff, commit profiles/ with the change.
set -uo pipefail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
MPRESS="$MPRESS" "$SRC/scripts/gen-profiles" "$tmp/profiles" || exit 1
if ! diff -rq "$SRC/profiles" "$tmp/profiles"; then
  for f in "$tmp"/profiles/*; do
    if ! cmp -s "$f" "$SRC/profiles/$(basename "$f")"; then
      echo "first difference, in $(basename "$f"):"
      diff -u "$SRC/profiles/$(basename "$f")" "$f" | head -40
      break
    fi
  done
  echo "profiles/ is stale: run scripts/gen-profiles and commit the result if the change is meant"
  exit 1
fi
echo "profiles/: $(ls "$SRC/profiles" | wc -l) files identical"

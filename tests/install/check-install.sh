#!/usr/bin/env bash
# Installs the build into a temporary DESTDIR and compiles a program against libmpress using
# only pkg-config: the installed headers and mpress.pc must be complete.
set -euo pipefail
build=$1
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --destdir "$dest" --no-rebuild --quiet >/dev/null
pc=$(find "$dest" -name mpress.pc | head -n 1)
[ -n "$pc" ] || { echo "mpress.pc was not installed"; exit 1; }
prefix=$(sed -n 's/^prefix=//p' "$pc")
# Point the .pc at the DESTDIR copy.
sed "s|^prefix=.*|prefix=$dest$prefix|" "$pc" > "$dest/mpress.pc"
cat > "$dest/use.c" <<'C'
#include <stdio.h>
#include <mpress/mpress.h>
int main(void)
{
    struct mpress_error err;
    mpress_error_clear(&err);
    printf("%s\n", mpress_version());
    return 0;
}
C
# A sanitizer build (-Db_sanitize=...) installs an instrumented libmpress: a program that uses
# it must be linked with the same runtime (ASan must come first in the library list).
san=$(meson introspect "$build" --buildoptions | python3 -c '
import json, sys
print(next((o["value"] for o in json.load(sys.stdin) if o["name"] == "b_sanitize"), "none"))')
sanflags=()
[ "$san" != none ] && sanflags=(-fsanitize="$san")
cc -std=c17 "${sanflags[@]}" -o "$dest/use" "$dest/use.c" \
  $(PKG_CONFIG_PATH="$dest" pkg-config --cflags --libs mpress) 2>"$dest/cc.log" ||
  { cat "$dest/cc.log"; exit 1; }
libdir=$(dirname "$(find "$dest" -name 'libmpress.so' | head -n 1)")
LD_LIBRARY_PATH="$libdir" "$dest/use"

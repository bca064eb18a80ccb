#!/bin/sh
# runtime-deps.sh DIR...: prints the Debian/Ubuntu packages that own the
# shared libraries the programs in DIR link against, one per line, sorted.
# The images' build stages run it on the installed programs, and the runtime
# stages install exactly that list, so no package name is guessed per
# distribution. Libraries that no package owns are an error, except ones
# ldd cannot find (the NVIDIA driver's, which the container toolkit mounts).
set -eu
[ $# -gt 0 ] || { echo "usage: runtime-deps.sh DIR..." >&2; exit 2; }
libs=$(
  for dir in "$@"; do
    for f in "$dir"/*; do
      [ -f "$f" ] && [ -x "$f" ] || continue
      ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
    done
  done | sort -u
)
status=0
for lib in $libs; do
  real=$(readlink -f "$lib")
  pkg=""
  # With a merged /usr, ldd and dpkg may spell a path with or without /usr.
  for p in "$lib" "$real" "/usr$lib" "${lib#/usr}" "/usr$real" "${real#/usr}"; do
    pkg=$(dpkg -S "$p" 2>/dev/null | head -n 1 | cut -d: -f1 | cut -d, -f1) || pkg=""
    [ -n "$pkg" ] && break
  done
  if [ -z "$pkg" ]; then
    echo "runtime-deps.sh: no package owns $lib" >&2
    status=1
    continue
  fi
  echo "$pkg"
done | sort -u
exit $status

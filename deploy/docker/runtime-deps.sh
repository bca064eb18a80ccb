#!/bin/sh
# runtime-deps.sh DIR...: prints the Debian/Ubuntu packages that own the
# shared libraries the programs in DIR link against, one per line, sorted.
# The images' build stages run it on the installed programs, and the runtime
# stages install exactly that list, so no package name is guessed per
# distribution. A library that no package owns is an error; libraries ldd
# cannot find at all (the NVIDIA driver's, which the container toolkit
# mounts at run time) are not listed.
set -eu
[ $# -gt 0 ] || { echo "usage: runtime-deps.sh DIR..." >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for dir in "$@"; do
    for f in "$dir"/*; do
        [ -f "$f" ] && [ -x "$f" ] || continue
        ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
    done
done | sort -u | {
    # The CUDA runtime and cuBLAS come with the CUDA base image (or a
    # toolkit installed outside dpkg, as on a build host): not packages to
    # install here.
    grep -v '^/usr/local/cuda' || true
} >"$tmp/libs"
# With a merged /usr, ldd and dpkg may spell a path with or without /usr,
# through a symlink or not: ask dpkg about every spelling at once.
while read -r lib; do
    real=$(readlink -f "$lib")
    for p in "$lib" "$real"; do
        echo "$lib $p"
        case "$p" in
        /usr/*) echo "$lib ${p#/usr}" ;;
        *) echo "$lib /usr$p" ;;
        esac
    done
done <"$tmp/libs" | sort -u >"$tmp/candidates"
# dpkg -S prints "pkg[:arch][, pkg2...]: /path" for each owned path.
awk '{ print $2 }' "$tmp/candidates" | sort -u | xargs -r dpkg -S 2>/dev/null |
    awk -F': ' '{ split($1, owners, ", "); sub(/:.*/, "", owners[1]); print $2, owners[1] }' \
    >"$tmp/owners" || true
awk 'NR == FNR { owner[$1] = $2; next }
     { if ($2 in owner) { pkg[$1] = owner[$2] } else if (!($1 in pkg)) { pkg[$1] = "" } }
     END { for (l in pkg) print l, pkg[l] }' "$tmp/owners" "$tmp/candidates" >"$tmp/map"
status=0
while read -r lib pkg; do
    if [ -z "$pkg" ]; then
        echo "runtime-deps.sh: no package owns $lib" >&2
        status=1
    fi
done <"$tmp/map"
awk 'NF == 2 { print $2 }' "$tmp/map" | sort -u
exit $status

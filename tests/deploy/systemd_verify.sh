#!/bin/sh
# systemd_verify.sh: `systemd-analyze verify` on every corral unit and the
# target, with @CORRAL_BINDIR@ pointing at this build's programs (verify
# checks that ExecStart= names an executable). Any warning about a corral
# unit fails the test, not only verify's exit status (an unknown key is
# only a warning to it). Skips (77) where systemd-analyze is absent.
set -u
src=${CORRAL_SOURCE_DIR:?}
build=${CORRAL_BUILD_DIR:?}
if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "systemd_verify: skipped: systemd-analyze is absent (Debian package systemd)"
    exit 77
fi
tmp=$(mktemp -d /tmp/corral-verify-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
n=0
for f in "$src"/deploy/systemd/*.service.in; do
    u=$(basename "$f" .in)
    sed "s|@CORRAL_BINDIR@|$build/bin|g" "$f" >"$tmp/$u"
    n=$((n + 1))
done
cp "$src/deploy/systemd/corral.target" "$tmp/"
n=$((n + 1))
out=$(systemd-analyze verify --man=no "$tmp"/*.service "$tmp/corral.target" 2>&1)
rc=$?
bad=$(printf '%s\n' "$out" | grep -i corral)
if [ "$rc" -ne 0 ] || [ -n "$bad" ]; then
    printf '%s\n' "$out"
    echo "systemd_verify: systemd-analyze verify failed (exit $rc)"
    echo "systemd_verify: 0 passed, 1 failed"
    exit 1
fi
echo "systemd_verify: $n units verified"
echo "systemd_verify: 1 passed, 0 failed"

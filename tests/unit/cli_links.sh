#!/bin/sh
# cli_links.sh: the corral command stays an HTTP client of the gateway: it
# links no bus library (ZeroMQ, CZMQ, msgpack), and its keygen verb runs
# corral-node's, which writes a CURVE keypair (public 0644, secret 0600).
set -eu
bin="$CORRAL_BUILD_DIR/bin"
fail() { echo "cli_links: FAIL: $*"; exit 1; }
command -v readelf >/dev/null || { echo "cli_links: skipped: readelf absent (binutils)"; exit 77; }

needed=$(readelf -d "$bin/corral" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p')
[ -n "$needed" ] || fail "readelf found no shared libraries in $bin/corral"
for lib in $needed; do
    case "$lib" in
    libzmq* | libczmq* | libmsgpack*) fail "corral links $lib (the bus)" ;;
    esac
done
if nm -D --undefined-only "$bin/corral" | grep -Eq ' (zmq_|zsock_|zcert_|zsys_|msgpack_)'; then
    fail "corral calls into the bus libraries"
fi

t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
out=$("$bin/corral" keygen --out "$t/keys" gpu1) || fail "corral keygen failed: $out"
echo "$out" | grep -q "public key: " || fail "keygen printed: $out"
[ "$(stat -c %a "$t/keys/gpu1_secret")" = 600 ] || fail "secret not 0600"
[ "$(stat -c %a "$t/keys/gpu1")" = 644 ] || fail "public not 0644"
grep -q 'public-key' "$t/keys/gpu1" || fail "no public key in the certificate"
# never overwrites
if "$bin/corral" keygen --out "$t/keys" gpu1 >/dev/null 2>"$t/err"; then
    fail "keygen overwrote a key"
fi
grep -q "already exists" "$t/err" || fail "overwrite refused without saying so: $(cat "$t/err")"
# without corral-node beside it: a clear error
CORRAL_BIN_DIR="$t" "$bin/corral" keygen --out "$t/k2" x >/dev/null 2>"$t/err" &&
    fail "keygen without corral-node succeeded"
grep -q "corral-node" "$t/err" || fail "missing corral-node not named: $(cat "$t/err")"
echo "cli_links: 1 passed, 0 failed"

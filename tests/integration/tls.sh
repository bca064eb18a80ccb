#!/bin/sh
# tls.sh: the gateway serves HTTPS with CORRAL_TLS_CERT / CORRAL_TLS_KEY (a
# self-signed certificate made here with openssl), checked with curl: the
# certificate is the one served, plain HTTP gets no answer, an unverified
# client is refused by curl, CORRAL_API_KEY still guards the routes, and a
# half or wrong configuration stops the gateway with a clear error. The
# gateway runs alone on 127.0.0.1 (port 0: the kernel picks one) with a
# private runtime dir, and is stopped by its PID.
set -u
bin="$CORRAL_BUILD_DIR/bin"
for tool in openssl curl; do
    command -v $tool >/dev/null || { echo "tls: SKIP: $tool is not installed"; exit 77; }
done
t=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$t"; }
trap cleanup EXIT
fail() { echo "tls: FAIL: $*"; [ -f "$t/gw.log" ] && tail -n 20 "$t/gw.log"; exit 1; }

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
    -keyout "$t/key.pem" -out "$t/cert.pem" >/dev/null 2>&1 || fail "openssl could not make a certificate"
mkdir -p "$t/run" && chmod 700 "$t/run"

# start_gateway [VAR=VALUE...]: starts it; sets pid and url once it listens.
start_gateway() {
    env CORRAL_RUNTIME_DIR="$t/run" OLLAMA_HOST=127.0.0.1:0 CORRAL_TLS_CERT="$t/cert.pem" \
        CORRAL_TLS_KEY="$t/key.pem" "$@" "$bin/corral-gateway" >"$t/gw.log" 2>&1 &
    pid=$!
    port=
    while [ -z "$port" ]; do
        kill -0 "$pid" 2>/dev/null || fail "the gateway exited"
        port=$(sed -n 's/.*listening on 127.0.0.1 port \([0-9]*\) .*/\1/p' "$t/gw.log")
        [ -n "$port" ] || sleep 0.1
    done
    grep -q "port $port (https" "$t/gw.log" || fail "the gateway does not say it serves HTTPS"
    url="https://127.0.0.1:$port"
}
stop_gateway() { kill "$pid"; wait "$pid" 2>/dev/null; pid=; }

start_gateway
out=$(curl -sS --cacert "$t/cert.pem" "$url/api/version") || fail "HTTPS request failed"
echo "$out" | grep -q '"version"' || fail "/api/version over HTTPS answered: $out"
curl -sS --cacert "$t/cert.pem" -o /dev/null -w '%{ssl_verify_result}' "$url/" | grep -qx 0 ||
    fail "the served certificate does not verify against the one made"
curl -sS -o /dev/null "$url/api/version" 2>/dev/null &&
    fail "curl accepted a self-signed certificate it was not given"
curl -sS -m 20 -o /dev/null "http://127.0.0.1:$port/api/version" 2>/dev/null &&
    fail "plain HTTP was answered on the HTTPS port"
stop_gateway

# With the API key: the way to expose corral beyond localhost.
start_gateway CORRAL_API_KEY=s3cret
code=$(curl -sS --cacert "$t/cert.pem" -o /dev/null -w '%{http_code}' "$url/api/version")
[ "$code" = 401 ] || fail "no key over HTTPS got $code, not 401"
code=$(curl -sS --cacert "$t/cert.pem" -H 'Authorization: Bearer s3cret' -o /dev/null \
    -w '%{http_code}' "$url/api/version")
[ "$code" = 200 ] || fail "the right key over HTTPS got $code, not 200"
stop_gateway

# Half or wrong configurations: the gateway refuses to start, saying why.
check_refused() {
    want=$1
    shift
    env CORRAL_RUNTIME_DIR="$t/run" OLLAMA_HOST=127.0.0.1:0 "$@" "$bin/corral-gateway" \
        >"$t/gw.log" 2>&1 && fail "the gateway ran with $*"
    grep -q "$want" "$t/gw.log" || fail "with $* the gateway did not say '$want'"
}
check_refused "go together" CORRAL_TLS_CERT="$t/cert.pem"
check_refused "cannot open" CORRAL_TLS_CERT="$t/cert.pem" CORRAL_TLS_KEY="$t/none.pem"
printf 'not a key' >"$t/junk"
check_refused "not a PEM file" CORRAL_TLS_CERT="$t/cert.pem" CORRAL_TLS_KEY="$t/junk"
check_refused "cannot serve HTTPS" CORRAL_TLS_CERT="$t/cert.pem" CORRAL_TLS_KEY="$t/cert.pem"
echo "tls: 1 passed, 0 failed"

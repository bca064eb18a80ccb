#!/bin/sh
# multihost.sh: two "hosts" on one machine. Network namespaces A and B are
# joined by a veth pair; `corral serve` runs in A with no GPUs and a nodes
# endpoint, a node agent runs in B with a described GPU (so the model is
# placed there) and its own blob cache. Checks: the runner of a chat lives
# in B and its blob was streamed and verified into B's cache, and ps (API
# and CLI) says so; a node whose key is not listed is refused, then joins
# once its key is copied into the keys dir (no scheduler restart); killing
# the node fails the in-flight request with a clear error and the next
# request is placed on A. Before that, the scheduler is killed (-9) and
# restarted, and the node's connection reset: its runner is adopted, not
# loaded again.
# Needs root (ip netns); skips with 77 where namespaces cannot be made.
set -u
BIN="${CORRAL_BUILD_DIR:?}/bin"
T=$(mktemp -d /tmp/corral-mh.XXXXXX)
NSA="crA$$"; NSB="crB$$"
VA="vcA$$"; VB="vcB$$"
IPA=10.231.0.1; IPB=10.231.0.2
PORT=$((20000 + $$ % 20000)); NPORT=$((PORT + 1))
SERVE_PID=""; NODE_PID=""; EVIL_PID=""; CURL_PID=""
FAILS=0

cleanup() {
    [ -n "${MH_HOLD:-}" ] && sleep "$MH_HOLD"
    for p in $CURL_PID $EVIL_PID $NODE_PID $SERVE_PID; do
        [ -n "$p" ] && kill -CONT "$p" 2>/dev/null
    done
    for p in $CURL_PID $EVIL_PID $NODE_PID; do
        [ -n "$p" ] && kill -9 "$p" 2>/dev/null
    done
    if [ -n "$SERVE_PID" ]; then
        kill -TERM "$SERVE_PID" 2>/dev/null
        i=0; while kill -0 "$SERVE_PID" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.2; i=$((i+1)); done
        kill -9 "$SERVE_PID" 2>/dev/null
    fi
    # Runners whose node was killed die with it (PDEATHSIG); make sure.
    for ns in $NSA $NSB; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    if [ "$FAILS" -ne 0 ]; then
        # Not the access lines of the polling loops: what the services said.
        for f in "$T"/serve.log "$T"/node.log "$T"/evil.log; do
            echo "---- $f"; grep -v ' | GET /api/ps$' "$f" | tail -80
        done
    fi
    rm -rf "$T"
}
trap cleanup EXIT INT TERM

fail() { echo "FAIL: $*"; FAILS=$((FAILS+1)); }
ok() { echo "ok: $*"; }

if [ "$(id -u)" != 0 ] || ! ip netns add "$NSA" 2>/dev/null; then
    echo "SKIP: cannot create network namespaces (needs root and ip netns)"
    exit 77
fi
ip netns add "$NSB" || { echo "SKIP: second namespace"; exit 77; }
ip link add "$VA" type veth peer name "$VB" || { echo "SKIP: no veth"; exit 77; }
ip link set "$VA" netns "$NSA" && ip link set "$VB" netns "$NSB" || exit 1
ip -n "$NSA" addr add $IPA/24 dev "$VA"; ip -n "$NSA" link set "$VA" up
ip -n "$NSB" addr add $IPB/24 dev "$VB"; ip -n "$NSB" link set "$VB" up
ip -n "$NSA" link set lo up; ip -n "$NSB" link set lo up

inA() { ip netns exec "$NSA" env "$@"; }
# Starts a program in a namespace in the background and prints its real
# pid (`ip netns exec` may fork, so $! would be the wrong process).
spawn() {
    ns=$1; log=$2; shift 2
    ip netns exec "$ns" sh -c 'echo $$ >"$0.pid"; exec env "$@"' "$log" "$@" >"$log" 2>&1 &
    for i in $(seq 1 500); do [ -s "$log.pid" ] && break; sleep 0.02; done
    cat "$log.pid"
}
inB() { ip netns exec "$NSB" env "$@"; }
http() { inA curl -s -m 30 "$@"; }

# Keys: the scheduler's, an admitted node's, and one nobody listed.
"$BIN/corral" keygen --out "$T/keys" scheduler >/dev/null || fail "keygen scheduler"
"$BIN/corral" keygen --out "$T/keys" nodeb >/dev/null || fail "keygen nodeb"
"$BIN/corral" keygen --out "$T/keys" evil >/dev/null || fail "keygen evil"
mode=$(stat -c %a "$T/keys/nodeb_secret")
[ "$mode" = 600 ] && ok "secret key mode 0600" || fail "secret key mode $mode"
mkdir -p "$T/admitted" && cp "$T/keys/nodeb" "$T/admitted/"

# Host A: corral serve, no GPUs, nodes endpoint. After its scheduler's
# restart it waits for nodeb's runner however slow the machine (the grace
# ends when the runner is adopted; it bounds only a node that never comes).
SERVE_PID=$(spawn "$NSA" "$T/serve.log" CORRAL_RUNTIME_DIR="$T/runA" CORRAL_MODELS="$T/models" \
    CORRAL_HOST="127.0.0.1:$PORT" CORRAL_GPU_INVENTORY=none \
    CORRAL_NODES_ENDPOINT="tcp://$IPA:$NPORT" \
    CORRAL_NODES_CERT="$T/keys/scheduler" CORRAL_NODE_KEYS_DIR="$T/admitted" \
    CORRAL_NODE_TIMEOUT=2s CORRAL_ADOPT_GRACE=60s CORRAL_DEBUG= \
    "$BIN/corral" serve)
up=0
for i in $(seq 1 600); do # up to 60 s on a slow, loaded machine
    if http -o /dev/null "http://127.0.0.1:$PORT/"; then up=1; break; fi
    sleep 0.1
done
[ $up = 1 ] || { fail "corral serve did not answer"; exit 1; }

# A small synthetic model. Its 8192-token context makes the greedy answer
# of the in-flight check below run 40960 tokens (10 x num_ctx 4096, no end
# token: measured), ~3 s at the 12,000 tokens/s this model reaches; with
# the default 256 it was 2560 tokens, 0.2 s, over before the freeze.
"$BIN/corral-gguf-synth" --out "$T/m.gguf" --type q8_0 --ctx 8192 >/dev/null || fail "synth"
printf 'FROM ./m.gguf\nPARAMETER temperature 0\n' >"$T/Modelfile"
(cd "$T" && inA CORRAL_HOST="127.0.0.1:$PORT" "$BIN/corral" create mh -f Modelfile >/dev/null) ||
    fail "create"

# Host B: the node, one described 8 GB GPU, its own cache, no shared store.
# The node gives up on a silent scheduler after CORRAL_NODE_TIMEOUT and
# stops its runners: 30 s, so a scheduler restart that a loaded machine
# stretches past 2 s (seen: 12 s) does not lose the runner the adoption
# check expects. (serve's own 2 s is how soon the killed node is lost.)
NODE_ENV="CORRAL_RUNTIME_DIR=$T/runB CORRAL_NODE_SCHEDULER=tcp://$IPA:$NPORT CORRAL_NODE_SERVER_CERT=$T/keys/scheduler CORRAL_NODE_TIMEOUT=30s CORRAL_GPU_INVENTORY=0:FakeGPU:8000000000,cpu:8000000000"
# Its cache is bounded (1 KB) and holds a stale blob nothing uses: after
# the fetch the stale one goes, the fetched one (in use) stays.
STALE=sha256-$(printf 'f%.0s' $(seq 1 64))
mkdir -p "$T/cacheB/blobs" && head -c 4096 /dev/zero >"$T/cacheB/blobs/$STALE"
NODE_PID=$(spawn "$NSB" "$T/node.log" $NODE_ENV CORRAL_NODE_NAME=nodeb CORRAL_NODE_CERT="$T/keys/nodeb" \
    CORRAL_NODE_CACHE="$T/cacheB" CORRAL_NODE_CACHE_MAX=1KB "$BIN/corral-node")
joined=0
for i in $(seq 1 600); do # up to 60 s
    grep -q "node 'nodeb' joined" "$T/serve.log" && { joined=1; break; }
    sleep 0.1
done
[ $joined = 1 ] && ok "node joined over CURVE" || fail "node did not join"

# A node with an unlisted key is refused.
EVIL_PID=$(spawn "$NSB" "$T/evil.log" CORRAL_RUNTIME_DIR="$T/runE" CORRAL_NODE_SCHEDULER="tcp://$IPA:$NPORT" \
    CORRAL_NODE_SERVER_CERT="$T/keys/scheduler" CORRAL_NODE_TIMEOUT=1s \
    CORRAL_GPU_INVENTORY="0:Evil GPU:80000000000" CORRAL_NODE_NAME=evil \
    CORRAL_NODE_CERT="$T/keys/evil" CORRAL_NODE_CACHE="$T/cacheE" \
    "$BIN/corral-node")

CHAT='{"model":"mh","messages":[{"role":"user","content":"hi"}],"stream":false,"options":{"num_predict":8}}'
r=$(http -X POST -d "$CHAT" "http://127.0.0.1:$PORT/api/chat")
echo "$r" | grep -q '"done":true' && ok "chat answered" || fail "chat: $r"
rpids=""
for p in $(ip netns pids "$NSB"); do
    [ "$(cat /proc/$p/comm 2>/dev/null)" = corral-runner ] && rpids="$rpids $p"
done
[ -n "$rpids" ] && ok "the runner lives in namespace B (pid$rpids)" ||
    fail "no corral-runner in namespace B"
digest=$(basename "$(ls "$T/cacheB/blobs/" 2>/dev/null | grep -v partial | grep -v "$STALE" | head -1)")
[ -n "$digest" ] && [ -f "$T/models/blobs/$digest" ] &&
    ok "blob $digest streamed into B's cache" || fail "no blob in B's cache"
[ ! -e "$T/cacheB/blobs/$STALE" ] && [ -f "$T/cacheB/blobs/$digest" ] &&
    ok "cache bound removed the unused blob, kept the one in use" ||
    fail "cache bound: $(ls "$T/cacheB/blobs/")"
ps=$(http "http://127.0.0.1:$PORT/api/ps")
echo "$ps" | grep -q '"size_vram":[1-9]' && ok "ps accounts it on B's GPU" ||
    fail "ps: $ps"
echo "$ps" | grep -q '"host":"nodeb"' && ok "ps says it runs on nodeb" ||
    fail "ps host: $ps"
out=$(inA CORRAL_HOST="127.0.0.1:$PORT" "$BIN/corral" ps)
echo "$out" | head -1 | grep -q 'PROCESSOR *HOST *CONTEXT' &&
    echo "$out" | grep -q '^mh:latest .* nodeb ' &&
    ok "corral ps shows the HOST column" || fail "corral ps: $out"

for i in $(seq 1 300); do # up to 30 s
    grep -q "no answer from the scheduler" "$T/evil.log" && break
    sleep 0.1
done
if grep -q "node 'evil' joined" "$T/serve.log"; then fail "unlisted key joined"
else ok "unlisted key refused"; fi
grep -q "no answer from the scheduler" "$T/evil.log" &&
    ok "refused node says why" || fail "refused node silent"

# Key rotation: list evil's public key while the scheduler runs; the node,
# still retrying, joins without a scheduler restart.
cp "$T/keys/evil" "$T/admitted/"
# Both lines, in either order: CZMQ's certificate store refreshes itself on
# every lookup (zcertstore(3)), so the node may join at its next handshake
# before the scheduler's once-a-second look at the dir logs the reload (the
# cause of a rare "no keys reload logged" when the test read the log right
# after the join).
for i in $(seq 1 600); do # up to 60 s
    grep -q "node 'evil' joined" "$T/serve.log" &&
        grep -q "node keys reloaded from $T/admitted: 2 admitted" "$T/serve.log" && break
    sleep 0.1
done
grep -q "node keys reloaded from $T/admitted: 2 admitted" "$T/serve.log" &&
    ok "scheduler reloaded the keys dir" || fail "no keys reload logged"
grep -q "node 'evil' joined" "$T/serve.log" &&
    ok "newly listed key joins without a restart" || fail "listed key did not join"
kill -9 "$EVIL_PID"; EVIL_PID=""

# The scheduler restarts (kill -9; serve restarts it): the node has its
# runner say hello as soon as the new scheduler answers, and it is adopted:
# ps lists mh on nodeb once, within 1 s of the new scheduler process (the
# issue's bound; ~0.3 s on an idle machine); a chat sent 100 ms after the
# restart is served by that runner (no load); the runner process is the
# same. Then the node's TCP connection is reset (ss -K): the same agent
# reconnects and keeps its runner.
now_ms() { date +%s%3N; }
sched_pid() {
    for p in $(ip netns pids "$NSA"); do
        [ "$(cat /proc/$p/comm 2>/dev/null)" = corral-schedule ] && echo "$p"
    done
}
brunners() {
    r=""
    for p in $(ip netns pids "$NSB"); do
        [ "$(cat /proc/$p/comm 2>/dev/null)" = corral-runner ] && r="$r $p"
    done
    echo "$r"
}
# ps lists mh on nodeb exactly once: ms since $1, or "" after 60 s (a
# loaded machine; the time is printed, not bounded: see test_e2e_adopt.c).
await_ps() {
    while [ $(( $(now_ms) - $1 )) -lt 60000 ]; do
        ps=$(http "http://127.0.0.1:$PORT/api/ps")
        n=$(echo "$ps" | grep -o '"name":"mh:latest"' | wc -l)
        [ "$n" = 1 ] && echo "$ps" | grep -q '"host":"nodeb"' &&
            { echo $(( $(now_ms) - $1 )); return; }
        sleep 0.01
    done
}
before=$(brunners)
loads=$(grep -c " loading mh" "$T/serve.log")
old=$(sched_pid)
# The node agent is frozen through the restart, so the chat below surely
# comes before the node is back (before the memo, that race was lost now
# and then in CI: the chat loaded mh on A and nodeb's runner was stopped
# as a duplicate). Its runner lives on; it speaks through the agent.
kill -STOP "$NODE_PID"
kill -9 "$old"
new=""
for i in $(seq 1 3000); do # up to 30 s
    new=$(sched_pid)
    [ -n "$new" ] && [ "$new" != "$old" ] && break
    new=""; sleep 0.01
done
t1=$(now_ms)
[ -n "$new" ] || fail "the scheduler was not restarted"
# The chat at +100 ms counts from when the new scheduler listens (the
# gateway retries a refused connect for 2 s only; a loaded machine can take
# longer to start it): a connect to its socket is refused (curl: 7) until
# then.
for i in $(seq 1 600); do # up to 60 s
    curl -s -m 2 --unix-socket "$T/runA/scheduler.sock" http://scheduler/ >/dev/null 2>&1
    [ $? != 7 ] && break
    sleep 0.05
done
(sleep 0.1; http -X POST -d "$CHAT" "http://127.0.0.1:$PORT/api/chat" >"$T/late.out") &
LATE_PID=$!
# The node thaws once the chat waits in the scheduler's queue.
for i in $(seq 1 600); do # up to 60 s
    http "http://127.0.0.1:$PORT/metrics" | grep -q '^corral_scheduler_queue_depth [1-9]' && break
    sleep 0.1
done
kill -CONT "$NODE_PID"
listed=$(await_ps "$t1")
[ -n "$listed" ] &&
    ok "node runner adopted: ps lists it ${listed} ms after the scheduler restart" ||
    fail "node runner not in ps within 60 s of the restart"
wait "$LATE_PID"
# The chat may have come before the node is back (a reconnect and a CURVE
# handshake): the new scheduler read from the runtime dir that nodeb holds
# runners, and waits for it instead of loading a second copy on A.
grep -q "nodes 'nodeb' held runners before this scheduler started" "$T/serve.log" &&
    ok "the new scheduler waits for nodeb (the runtime dir's memo)" ||
    fail "the new scheduler did not know nodeb held runners"
# Served by the adopted runner, not a second load: the next check.
ld=$(grep -o '"load_duration":[0-9]*' "$T/late.out" | cut -d: -f2)
grep -q '"done":true' "$T/late.out" && [ -n "$ld" ] &&
    ok "chat 100 ms after the restart served by the adopted runner (load_duration $ld ns)" ||
    fail "chat after the restart: $(cat "$T/late.out")"
[ "$(grep -c " loading mh" "$T/serve.log")" = "$loads" ] && [ "$(brunners)" = "$before" ] &&
    ok "no second load; the same runner process ($before)" ||
    fail "runners after the restart: $(brunners) (were $before)"
killed=$(ip netns exec "$NSB" ss -K -t dst "$IPA" dport = ":$NPORT" 2>/dev/null | tail -n +2 | wc -l)
if [ "$killed" -gt 0 ]; then
    t1=$(now_ms)
    for i in $(seq 1 3000); do # up to 30 s (ZeroMQ reconnects; a loaded machine)
        grep -q "node 'nodeb' reconnected" "$T/serve.log" && break
        sleep 0.01
    done
    grep -q "node 'nodeb' reconnected" "$T/serve.log" &&
        ok "node reconnected after its connection was reset" ||
        fail "node did not reconnect after a reset"
    listed=$(await_ps "$t1")
    r=$(http -X POST -d "$CHAT" "http://127.0.0.1:$PORT/api/chat")
    echo "$r" | grep -q '"done":true' && [ -n "$listed" ] &&
        [ "$(grep -c " loading mh" "$T/serve.log")" = "$loads" ] &&
        [ "$(brunners)" = "$before" ] && ! grep -q "node 'nodeb' lost" "$T/serve.log" &&
        ok "after the reset: same runner, no load, ps lists it once" ||
        fail "after the reset: $r; runners $(brunners) (were $before)"
else
    echo "skip: ss -K cannot reset the node's connection here"
fi

# Kill the node while a streamed answer is in flight: freeze it first so
# the answer cannot finish, then kill -9 (its runner dies with it).
LONG='{"model":"mh","messages":[{"role":"user","content":"tell me more"}],"options":{"num_predict":100000}}'
inA curl -s -N -m 20 -X POST -d "$LONG" "http://127.0.0.1:$PORT/api/chat" >"$T/stream.out" &
CURL_PID=$!
for i in $(seq 1 600); do # up to 30 s
    [ -s "$T/stream.out" ] && break
    sleep 0.05
done
kill -STOP "$NODE_PID" $(brunners) 2>/dev/null
kill -9 "$NODE_PID"
wait "$CURL_PID" 2>/dev/null; CURL_PID=""; NODE_PID=""
if grep -q '"done":true' "$T/stream.out"; then
    fail "the answer finished before the node was killed"
fi
grep -q "node 'nodeb' lost" "$T/stream.out" &&
    ok "in-flight request failed: $(grep -o '"error":"[^"]*"' "$T/stream.out" | head -1)" ||
    fail "no clear error in the stream: $(tail -c 300 "$T/stream.out")"

# The next request is placed on A (the only host left).
r=$(http -X POST -d "$CHAT" "http://127.0.0.1:$PORT/api/chat")
echo "$r" | grep -q '"done":true' && ok "next request recovered" || fail "after loss: $r"
apids=""
for p in $(ip netns pids "$NSA"); do
    [ "$(cat /proc/$p/comm 2>/dev/null)" = corral-runner ] && apids="$apids $p"
done
[ -n "$apids" ] && ok "re-placed on A (pid$apids)" || fail "no runner on A"
out=$(inA CORRAL_HOST="127.0.0.1:$PORT" "$BIN/corral" ps)
echo "$out" | grep -q '^mh:latest' && ! echo "$out" | grep -q HOST &&
    ok "corral ps on A alone has Ollama's columns" || fail "corral ps on A: $out"

[ "$FAILS" -eq 0 ] || exit 1
echo "multihost: all checks passed"

#!/bin/sh
# drain.sh: graceful SIGTERM. A streamed answer in flight when `corral
# serve` gets SIGTERM completes normally; a new request afterwards is
# refused (connection refused, or 503 on a kept-alive connection); serve
# exits within CORRAL_DRAIN_TIMEOUT (120 s here) plus its grace period (10 s).
set -u
BIN="${CORRAL_BUILD_DIR:?}/bin"
T=$(mktemp -d /tmp/corral-drain.XXXXXX)
# A port nothing answers on now (the PID picks it; a taken one is skipped).
PORT=$((20000 + ($$ * 7) % 20000))
for i in 1 2 3 4 5 6 7 8; do
    curl -s -o /dev/null -m 2 "http://127.0.0.1:$PORT/"
    [ $? = 7 ] && break
    PORT=$((20000 + (PORT + 7919) % 20000))
done
SERVE_PID=""; CURL_PID=""; RUNNERS=""; FAILS=0
cleanup() {
    [ -n "$CURL_PID" ] && kill -9 "$CURL_PID" 2>/dev/null
    [ -n "$SERVE_PID" ] && kill -9 "$SERVE_PID" 2>/dev/null
    # Runners outlive a killed scheduler (they wait to be adopted).
    for p in $RUNNERS; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
    [ "$FAILS" -ne 0 ] && tail -30 "$T/serve.log"
    rm -rf "$T"
}
trap cleanup EXIT INT TERM
fail() { echo "FAIL: $*"; FAILS=$((FAILS+1)); }
ok() { echo "ok: $*"; }
# PIDs of the corral-runner processes whose scheduler is serve's child.
serve_runners() {
    for d in /proc/[0-9]*; do
        [ "$(cat "$d/comm" 2>/dev/null)" = corral-runner ] || continue
        pp=$(cut -d' ' -f4 "$d/stat" 2>/dev/null)
        [ -n "$pp" ] && [ "$(cut -d' ' -f4 "/proc/$pp/stat" 2>/dev/null)" = "$SERVE_PID" ] &&
            echo "${d#/proc/}"
    done
}

export CORRAL_RUNTIME_DIR="$T/run" CORRAL_MODELS="$T/models" \
    CORRAL_HOST="127.0.0.1:$PORT" CORRAL_DRAIN_TIMEOUT=120s
"$BIN/corral" serve >"$T/serve.log" 2>&1 &
SERVE_PID=$!
up=0
for i in $(seq 1 600); do # up to 60 s on a slow, loaded machine
    [ "$(curl -s -m 5 "http://127.0.0.1:$PORT/")" = "Ollama is running" ] && { up=1; break; }
    kill -0 "$SERVE_PID" 2>/dev/null || break
    sleep 0.1
done
[ $up = 1 ] || { fail "corral serve did not come up on port $PORT"; exit 1; }
# A 50 MB model: at ~400 tokens/s on a 2-core machine its answer (2560
# tokens: num_predict is capped at 10 x num_ctx) streams for seconds. The
# 1 MB default ran 10,000 tokens/s and once finished before a loaded CI
# machine's gateway had closed its listener.
"$BIN/corral-gguf-synth" --out "$T/m.gguf" --type q8_0 \
    --dim 1024 --layers 4 --heads 16 --kv-heads 4 --ffn 2816 >/dev/null || fail "synth"
printf 'FROM ./m.gguf\nPARAMETER temperature 0\n' >"$T/Modelfile"
(cd "$T" && "$BIN/corral" create dm -f Modelfile >/dev/null) || fail "create"
# Load it first, so the timed part is generation only.
curl -s -m 30 -d '{"model":"dm","prompt":""}' "http://127.0.0.1:$PORT/api/generate" >/dev/null

# 3000 greedy tokens asked, 2560 given (no end token before: the answer
# ends by its length): seconds, so the stream is still running when the
# listener closes; the drain timeout leaves room for a slow machine.
curl -s -N -m 150 -d '{"model":"dm","prompt":"go","options":{"num_predict":3000}}' \
    "http://127.0.0.1:$PORT/api/generate" >"$T/stream.out" &
CURL_PID=$!
for i in $(seq 1 3000); do [ -s "$T/stream.out" ] && break; sleep 0.02; done
# Hold the answer: its runner is stopped (SIGSTOP) until the listener has
# closed and a new request was refused, so the stream is in flight then on
# any machine, however fast; SIGCONT lets it finish.
RUNNERS=$(serve_runners)
[ -n "$RUNNERS" ] || fail "no corral-runner under serve"
kill -STOP $RUNNERS
grep -q '"done":true' "$T/stream.out" && fail "the answer ended before SIGTERM"
t0=$(date +%s.%N)
kill -TERM "$SERVE_PID"
# The gateway closes its listener when it starts draining: wait for that
# (GET / refused, or 503 on a kept-alive connection) rather than assume a
# fixed time was enough; it must happen while the answer still streams (a
# gateway that only stopped accepting at exit fails here).
closed=0
for i in $(seq 1 400); do # up to 20 s
    code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 "http://127.0.0.1:$PORT/")
    rc=$?
    if [ $rc = 7 ] || [ "$code" = 503 ]; then closed=1; break; fi
    sleep 0.05
done
if [ $closed = 1 ] && ! grep -q '"done":true' "$T/stream.out" && kill -0 "$CURL_PID" 2>/dev/null; then
    ok "the listener closed while the answer was streaming"
else
    fail "the listener did not close during the drain (closed=$closed)"
fi
code=$(curl -s -o "$T/new.out" -w '%{http_code}' -m 5 \
    -d '{"model":"dm","prompt":"x","stream":false}' "http://127.0.0.1:$PORT/api/generate")
rc=$?
if [ $rc = 7 ] || [ "$code" = 503 ]; then ok "new request refused (curl rc $rc, http $code)"
else fail "new request during drain: rc $rc http $code $(cat "$T/new.out")"; fi
kill -CONT $RUNNERS
wait "$CURL_PID"; CURL_PID=""
tail -1 "$T/stream.out" | grep -q '"done":true' &&
    ok "in-flight answer completed: $(tail -1 "$T/stream.out" | grep -o '"done_reason":"[a-z]*"')" ||
    fail "in-flight answer cut: $(tail -c 200 "$T/stream.out")"
exited=0
for i in $(seq 1 1350); do
    kill -0 "$SERVE_PID" 2>/dev/null || { exited=1; break; }
    sleep 0.1
done
t1=$(date +%s.%N)
[ $exited = 1 ] && ok "serve exited $(echo "$t1 - $t0" | bc) s after SIGTERM" ||
    fail "serve still running 135 s after SIGTERM"
wait "$SERVE_PID"; echo "serve exit status $?"; SERVE_PID=""
[ "$FAILS" -eq 0 ] || exit 1
echo "drain: all checks passed"

#!/bin/sh
# vs_llamaserver.sh: many users at once (issue 18), corral against
# llama.cpp's llama-server on the same synthetic GGUF.
#
#   bench/vs_llamaserver.sh [--bin DIR] [--server PATH] [--work DIR]
#                           [--layers L] [--type T] [--threads T] [--np N]
#                           [--np1] [-- LOADGEN-ARGS...]
#
# Writes the model (bench-bench --synth tinyllama TYPE, LAYERS layers:
# default q4_0, all 22), starts `corral serve` (private port, runtime dir
# and store, OLLAMA_NUM_PARALLEL=N, default 8; the model created with
# num_thread T and num_ctx 1024 per slot) and llama-server (-np N -cb -t T,
# -c N x 1024, so each slot has 1024 positions as corral's), waits until
# both answer, runs bench-loadgen (its arguments after --; default: all
# scenarios, N = 1,2,4,8, 3 rounds), and stops both by PID. --np1 starts a
# second corral with OLLAMA_NUM_PARALLEL left at its default, for the
# single-user comparison at N = 1. Logs and the model stay in --work.
# Never part of ctest: it needs llama-server, which CI does not have.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/../build/bin"
server=/work/ref/llama.cpp/build-server/bin/llama-server
work=${TMPDIR:-/tmp}/corral-vs-llamaserver
layers=22
type=q4_0
threads=2
np=8
np1=0
while [ $# -gt 0 ]; do
    case $1 in
    --bin) bin=$2; shift 2 ;;
    --server) server=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --type) type=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --np1) np1=1; shift ;;
    --) shift; break ;;
    *) echo "usage: $0 [--bin DIR] [--server PATH] [--work DIR] [--layers L] [--type T]" \
            "[--threads T] [--np N] [--np1] [-- LOADGEN-ARGS...]" >&2; exit 2 ;;
    esac
done
[ -x "$server" ] || { echo "$0: no llama-server at $server" >&2; exit 2; }
mkdir -p "$work"
work=$(cd "$work" && pwd)
model="$work/synth-tinyllama-$type-$layers.gguf"
[ -f "$model" ] || "$bin/bench-bench" --synth tinyllama "$type" "$model" "$layers" >/dev/null

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

pids=
stop_all() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
}
trap stop_all EXIT INT TERM

# start_corral NAME PORT PARALLEL(empty: default): serve in the background
start_corral() {
    mkdir -p "$work/$1/models"
    mkdir -p "$work/$1/run"
    chmod 700 "$work/$1/run" # corral serve refuses a runtime dir others can open
    (
        unset OLLAMA_HOST OLLAMA_MODELS OLLAMA_NUM_PARALLEL
        [ -n "$3" ] && export OLLAMA_NUM_PARALLEL="$3"
        # Kept loaded for the whole run: a llama-server round longer than
        # the 5 m default keep-alive made corral's next round reload.
        export CORRAL_RUNTIME_DIR="$work/$1/run" CORRAL_MODELS="$work/$1/models" \
               CORRAL_HOST="127.0.0.1:$2" OLLAMA_KEEP_ALIVE=-1
        exec "$bin/corral" serve
    ) >"$work/$1.log" 2>&1 &
    pids="$pids $!"
}

# wait_http URL: until it answers 200 (the server's own start time)
wait_http() {
    i=0
    until curl -sf -o /dev/null "$1"; do
        i=$((i + 1))
        [ $i -lt 600 ] || { echo "$0: $1 never answered" >&2; exit 1; }
        sleep 0.5
    done
}

# create NAME PORT: the model in that corral
create() {
    printf 'FROM %s\nPARAMETER num_thread %s\nPARAMETER num_ctx 1024\n' "$model" "$threads" \
        >"$work/Modelfile"
    env -u OLLAMA_HOST CORRAL_HOST="127.0.0.1:$2" "$bin/corral" create synth -f "$work/Modelfile" \
        >>"$work/$1.log" 2>&1
}

cport=$(free_port)
start_corral corral "$cport" "$np"
lport=$(free_port)
"$server" -m "$model" --host 127.0.0.1 --port "$lport" -np "$np" -cb -t "$threads" \
    -c $((np * 1024)) >"$work/llama-server.log" 2>&1 &
pids="$pids $!"
extra=
if [ $np1 -eq 1 ]; then
    pport=$(free_port)
    start_corral corral-np1 "$pport" ""
    extra="--corral-np1 127.0.0.1:$pport"
fi
wait_http "http://127.0.0.1:$cport/"
create corral "$cport"
wait_http "http://127.0.0.1:$lport/health"
if [ $np1 -eq 1 ]; then
    wait_http "http://127.0.0.1:$pport/"
    create corral-np1 "$pport"
fi
# shellcheck disable=SC2086 # extra is a word list by design
"$bin/bench-loadgen" --corral "127.0.0.1:$cport" --model synth \
    --llama "127.0.0.1:$lport" $extra "$@"

#!/bin/sh
# pull_speed.sh: `corral pull` against plain curl on one blob (issue 18).
#
# Starts Debian's docker-registry on a private loopback port with its
# storage in a temp dir, pushes a random blob (1 GiB unless --size) as the
# model layer of a manifest, starts `corral serve` on another private port
# with its store in the same temp dir (so on the same disk), then times, in
# interleaved rounds:
#   curl  `curl -o FILE URL` of the blob, then `sync FILE` (a pull fsyncs
#         what it stored, so curl's bytes are put on disk too);
#   pull  `corral pull --insecure` of the model into an empty store
#         (cold: the model is removed before each round), which downloads,
#         verifies the SHA-256 and fsyncs.
# Prints each round, the medians, pull rate / curl rate and PASS when it is
# at least --want (0.90). The registry serves both from the page cache
# after the first read, the same for both. Ratios on a busy machine are
# noisy; run it on a quiet one for the issue's figure.
#
#   bench/pull_speed.sh [--bin DIR] [--size MB] [--rounds N] [--want R]
#                       [--work DIR] [--keep]
#
# --bin: corral's build/bin (default ../build/bin beside this script).
# --work: where the temp dir goes (default $TMPDIR or /tmp); the registry's
# copy, curl's file and the store all live there. Needs about three times
# the blob's size free. Not a ctest: it moves gigabytes.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/../build/bin"
size_mb=1024
rounds=5
want=0.90
work_root=${TMPDIR:-/tmp}
keep=0
while [ $# -gt 0 ]; do
    case "$1" in
    --bin) bin=$2; shift 2 ;;
    --size) size_mb=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --want) want=$2; shift 2 ;;
    --work) work_root=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "pull_speed.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
registry_bin=/usr/bin/docker-registry
for x in "$registry_bin" "$bin/corral" "$bin/corral-registry"; do
    if [ ! -x "$x" ]; then
        echo "pull_speed.sh: $x is missing (docker-registry: tools/install-deps.sh;" \
             "corral: build it)" >&2
        exit 2
    fi
done
for x in curl sha256sum python3; do
    command -v "$x" >/dev/null || { echo "pull_speed.sh: needs $x" >&2; exit 2; }
done

work=$(mktemp -d "$work_root/corral-pull-speed.XXXXXX")
reg_pid=
serve_pid=
cleanup() {
    set +e # a service's exit status must not stop the cleanup
    # Only the processes this script started, by PID.
    [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
    [ -n "$reg_pid" ] && kill "$reg_pid" 2>/dev/null && wait "$reg_pid" 2>/dev/null
    if [ "$keep" = 1 ]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
now() { date +%s.%N; }
wait_http() { # URL: up to 60 s, polled every 0.1 s
    i=0
    while [ $i -lt 600 ]; do
        curl -sf -o /dev/null "$1" && return 0
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

# ---- docker-registry ----
rport=$(free_port)
remote="127.0.0.1:$rport"
mkdir -p "$work/oci"
cat >"$work/oci/config.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $work/oci/data
  delete:
    enabled: true
http:
  addr: $remote
  secret: corral-bench-secret
EOF
"$registry_bin" serve "$work/oci/config.yml" >"$work/oci/log" 2>&1 &
reg_pid=$!
wait_http "http://$remote/v2/" || { echo "docker-registry did not start" >&2; exit 1; }

# ---- the blob and its manifest ----
repo=bench/big
echo "writing a ${size_mb} MiB random blob..." >&2
head -c $((size_mb * 1024 * 1024)) /dev/urandom >"$work/blob"
blob_hex=$(sha256sum "$work/blob" | cut -d' ' -f1)
blob_size=$(stat -c %s "$work/blob")
printf '{"model_format":"gguf","model_family":"llama","model_families":["llama"],"model_type":"1B","file_type":"F16","architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$blob_hex" >"$work/config.json"
cfg_hex=$(sha256sum "$work/config.json" | cut -d' ' -f1)
cfg_size=$(stat -c %s "$work/config.json")

push_blob() { # FILE HEX
    loc=$(curl -sf -X POST -D - -o /dev/null "http://$remote/v2/$repo/blobs/uploads/" |
          tr -d '\r' | sed -n 's/^[Ll]ocation: //p')
    case "$loc" in http*) ;; *) loc="http://$remote$loc" ;; esac
    case "$loc" in *\?*) sep='&' ;; *) sep='?' ;; esac
    # -T streams the file (--data-binary would hold it all in memory).
    curl -sf -T "$1" -H 'Content-Type: application/octet-stream' \
        -o /dev/null "$loc${sep}digest=sha256:$2"
}
echo "pushing it to docker-registry on $remote..." >&2
push_blob "$work/config.json" "$cfg_hex"
push_blob "$work/blob" "$blob_hex"
rm -f "$work/blob"
mt=application/vnd.docker.distribution.manifest.v2+json
printf '{"schemaVersion":2,"mediaType":"%s","config":{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:%s","size":%s}]}' \
    "$mt" "$cfg_hex" "$cfg_size" "$blob_hex" "$blob_size" >"$work/manifest.json"
curl -sf -X PUT -H "Content-Type: $mt" --data-binary "@$work/manifest.json" \
    -o /dev/null "http://$remote/v2/$repo/manifests/t"

# ---- corral ----
gport=$(free_port)
export CORRAL_HOST="127.0.0.1:$gport"
export CORRAL_MODELS="$work/models"
export CORRAL_RUNTIME_DIR="$work/run"
unset OLLAMA_HOST OLLAMA_MODELS
# The scheduler wants a runner binary to start; a pull never runs one.
[ -x "$bin/corral-runner" ] || export CORRAL_RUNNER_BIN=/bin/true
"$bin/corral" serve >"$work/serve.log" 2>&1 &
serve_pid=$!
wait_http "http://$CORRAL_HOST/" || { echo "corral serve did not start" >&2; exit 1; }
model="$remote/$repo:t"
url="http://$remote/v2/$repo/blobs/sha256:$blob_hex"

# A first read of each puts the registry's copy in the page cache for both.
curl -sf -o /dev/null "$url"

curl_round() {
    rm -f "$work/curl.out"
    t0=$(now)
    curl -sf -o "$work/curl.out" "$url"
    sync "$work/curl.out"
    t1=$(now)
    got=$(stat -c %s "$work/curl.out")
    [ "$got" = "$blob_size" ] || { echo "curl fetched $got bytes" >&2; exit 1; }
    rm -f "$work/curl.out"
    echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}'
}
pull_round() {
    "$bin/corral" rm "$model" >/dev/null 2>&1 || true
    [ ! -e "$CORRAL_MODELS/blobs/sha256-$blob_hex" ] ||
        { echo "the blob is still in the store" >&2; exit 1; }
    t0=$(now)
    "$bin/corral" pull --insecure "$model" >"$work/pull.out" 2>&1 ||
        { cat "$work/pull.out" >&2; exit 1; }
    t1=$(now)
    echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}'
}

tc=""
tp=""
i=1
while [ $i -le "$rounds" ]; do
    c=$(curl_round)
    p=$(pull_round)
    printf 'round %d: curl+sync %s s, pull %s s\n' "$i" "$c" "$p"
    tc="$tc $c"
    tp="$tp $p"
    i=$((i + 1))
done
median() { echo "$@" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
mc=$(median $tc)
mp=$(median $tp)
echo "the registry's own timing of each pull (download, verify after it, sync):"
grep "sha256:$(echo "$blob_hex" | cut -c1-12): .* new) in " "$work/serve.log" |
    sed 's/^.*sha256:/  sha256:/' | tail -n "$rounds"
awk -v c="$mc" -v p="$mp" -v b="$blob_size" -v w="$want" 'BEGIN {
    r = c / p
    printf "blob %d bytes, %d rounds: curl+sync median %.3f s (%.0f MB/s), pull median %.3f s (%.0f MB/s)\n",
           b, '"$rounds"', c, b / c / 1e6, p, b / p / 1e6
    printf "pull/curl rate %.2f (want >= %.2f): %s\n", r, w, (r >= w ? "PASS" : "FAIL")
    if (r >= w) exit 0
    exit 1
}'

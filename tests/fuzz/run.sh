#!/usr/bin/env bash
# run.sh: fuzzes one libFuzzer harness for a bounded time on its corpus.
#
#   run.sh HARNESS SECONDS SEEDS WORK [--max-len N] [--seed PATH]... [--vocab PATH]...
#
# WORK/corpus starts as the committed seeds (SEEDS, a folder) and takes
# the new inputs; WORK/gen gets the seeds the harness makes with the
# project's own encoders (CORRAL_FUZZ_SEED_DIR); WORK/shared links to the
# shared test data named by --seed (files or globs; missing ones are
# skipped, saying so). --vocab names a vocabulary the harness needs
# (CORRAL_FUZZ_VOCABS): without one the run is skipped (exit 77).
# WORK/corpus is emptied first unless CORRAL_FUZZ_KEEP=1 (bench/fuzz keeps
# what long runs found). A crash, leak, timeout or sanitizer report
# leaves WORK/crash-* (or leak-, timeout-, oom-) and fails; the last line
# says the CPU seconds and inputs run.
set -u
bin=$1 secs=$2 seeds=$3 work=$4
shift 4
name=$(basename "$bin")
max_len=()
vocabs=""
shared=()
while (($#)); do
    case "$1" in
    --max-len) max_len=(-max_len="$2"); shift 2 ;;
    --seed) shared+=("$2"); shift 2 ;;
    --vocab)
        if [ ! -f "$2" ]; then
            echo "$name: SKIP: vocabulary $2 is missing (no shared test data)"
            exit 77
        fi
        vocabs=${vocabs:+$vocabs:}$2
        shift 2 ;;
    *) echo "usage: run.sh HARNESS SECONDS SEEDS WORK [--max-len N] [--seed PATH]... [--vocab PATH]..." >&2
       exit 2 ;;
    esac
done

# Findings of an earlier run go with it (bench/fuzz keeps both).
[ "${CORRAL_FUZZ_KEEP:-0}" = 1 ] ||
    rm -rf "$work/corpus" "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*
rm -rf "$work/gen" "$work/shared"
mkdir -p "$work/corpus" "$work/gen" "$work/shared" || exit 1
if [ -d "$seeds" ]; then
    cp -p "$seeds"/* "$work/corpus/" 2>/dev/null
fi
missing=0
for pattern in "${shared[@]}"; do
    found=0
    for f in $pattern; do
        [ -f "$f" ] || continue
        ln -sf "$f" "$work/shared/$(basename "$f")"
        found=1
    done
    ((found)) || missing=$((missing + 1))
done
((missing)) && echo "$name: $missing shared seed pattern(s) matched nothing (no shared test data?); committed seeds only"

export CORRAL_FUZZ_VOCABS=$vocabs
# CORRAL_FUZZ_TIMEOUT (default 10): wall seconds one input may take before
# libFuzzer calls it a hang. bench/fuzz raises it: a long run at nice 19 on
# a busy machine can wait longer than that for a CPU (session 11's long run
# had six such false timeouts, every one of them an input that runs in ms).
# A harness without seeds of its own just runs no input (-runs=0).
CORRAL_FUZZ_SEED_DIR="$work/gen" "$bin" -runs=0 -artifact_prefix="$work/" \
    >"$work/seeds.log" 2>&1 || {
    cat "$work/seeds.log"
    echo "$name: FAIL: the harness could not write its seeds"
    exit 1
}

# libFuzzer's own exit code for a finding is 77, which ctest reads as a
# skip: every finding exits 1 here.
"$bin" -max_total_time="$secs" -timeout="${CORRAL_FUZZ_TIMEOUT:-10}" -rss_limit_mb=2560 -error_exitcode=1 \
    -timeout_exitcode=1 -print_final_stats=1 -artifact_prefix="$work/" "${max_len[@]}" \
    "$work/corpus" "$work/gen" "$work/shared" >"$work/fuzz.log" 2>&1
rc=$?
tail -n 40 "$work/fuzz.log"
# `times`' second line: the CPU (user, system) of the harness.
times >"$work/times"
cpu=$(tail -n 1 "$work/times" | awk '{split($1, u, /[ms]/); split($2, s, /[ms]/);
                                printf "%.1f", u[1] * 60 + u[2] + s[1] * 60 + s[2]}')
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/fuzz.log")
# Coverage: the edges libFuzzer's last status line counts (of those in the
# libraries the harness links).
cov=$(grep -a -E '^#[0-9]+' "$work/fuzz.log" | tail -n 1 | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
printf '%s: %s s CPU, %s inputs, %s edges covered, corpus %s files, exit %d\n' "$name" \
    "$cpu" "${execs:-?}" "${cov:-?}" "$(ls "$work/corpus" | wc -l)" "$rc"
exit "$rc"

# llamabench_rounds.sh: what bench/vs_llamabench_moe.sh and
# bench/vs_llamabench_dense.sh share, sourced by both: corral's bench-bench
# and llama.cpp's llama-bench on one GGUF in interleaved rounds, the
# medians and the verdicts. The sourcing script sets bin, lb, threads,
# rounds and work first.

median() { # the median of the numbers on stdin
    sort -g | awk '{v[NR] = $1} END {if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
load_avg() { cut -d' ' -f1-3 /proc/loadavg; }

# ours MODEL LOG: prints "bw pp512 tg128" from bench-bench's median line
ours() {
    "$bin/bench-bench" "$1" -t "$threads" -r 1 --no-load >"$2" 2>&1 || return 1
    awk '/^median:/ {for (i = 1; i <= NF; i++) {if ($i == "bw") bw = $(i + 1);
         if ($i == "pp512") pp = $(i + 1); if ($i == "tg128") tg = $(i + 1)}}
         END {if (tg == "") exit 1; print bw, pp, tg}' "$2"
}

# theirs MODEL LOG: prints "pp512 tg128" from llama-bench's jsonl
theirs() {
    "$lb" -m "$1" -t "$threads" -p 512 -n 128 -r 1 -o jsonl >"$2" 2>"$2.err" || return 1
    python3 - "$2" <<'EOF_PY'
import json, sys
pp = tg = None
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if r.get("n_prompt") == 512 and r.get("n_gen") == 0:
        pp = r["avg_ts"]
    if r.get("n_gen") == 128 and r.get("n_prompt") == 0:
        tg = r["avg_ts"]
if pp is None or tg is None:
    sys.exit(1)
print(pp, tg)
EOF_PY
}

# bench_model NAME MODEL MARGIN_GB PP_MIN FRACTION_MIN: the rounds on one
# model, a row each, then the medians and the verdict (tg128 >= 1.10x
# llama-bench, pp512 >= PP_MIN x, decode at >= FRACTION_MIN of the
# bandwidth). Returns 1 when a verdict or a run fails, or when
# MemAvailable is below the file's size + MARGIN_GB (skipped, saying so).
bench_model() {
    name=$1 model=$2 margin=$3 pp_min=$4 fr_min=$5
    size=$(stat -c %s "$model")
    avail=$(awk '/^MemAvailable:/ {printf "%.0f", $2 * 1024}' /proc/meminfo)
    if [ "$avail" -lt $((size + margin * 1000000000)) ]; then
        echo "== $name: SKIPPED: MemAvailable $((avail / 1000000)) MB < file $((size / 1000000)) MB + $margin GB"
        return 1
    fi
    bpt=$(python3 "$here/moe_token_bytes.py" "$model" | cut -d' ' -f1)
    echo "== $name: $model, $(awk "BEGIN {printf \"%.3f\", $size / 1e9}") GB file," \
         "$(awk "BEGIN {printf \"%.3f\", $bpt / 1e9}") GB read per token, $threads threads," \
         "$rounds rounds"
    printf '%-5s %-16s %8s %9s %9s %6s | %9s %9s %6s | %-16s\n' round "load (ours)" "bw GB/s" \
        pp512 tg128 "bw%" "lb pp512" "lb tg128" "bw%" "load (lb)"
    res="$work/$name.rounds"
    : >"$res"
    r=0 bad=0
    while [ $r -lt "$rounds" ]; do
        # alternate who goes first, so drift in the machine's load is shared
        if [ $((r % 2)) -eq 0 ]; then
            l1=$(load_avg); o=$(ours "$model" "$work/$name.ours.$r.log") || o=
            l2=$(load_avg); t=$(theirs "$model" "$work/$name.lb.$r.jsonl") || t=
        else
            l2=$(load_avg); t=$(theirs "$model" "$work/$name.lb.$r.jsonl") || t=
            l1=$(load_avg); o=$(ours "$model" "$work/$name.ours.$r.log") || o=
        fi
        if [ -z "$o" ] || [ -z "$t" ]; then
            echo "round $r failed: corral '${o}' (log $work/$name.ours.$r.log), llama-bench '${t}' (log $work/$name.lb.$r.jsonl.err)"
            bad=1
            r=$((r + 1))
            continue
        fi
        echo "$o $t" | awk -v b="$bpt" -v r="$r" -v l1="$l1" -v l2="$l2" -v f="$res" '{
            fo = $3 * b / ($1 * 1e9); ft = $5 * b / ($1 * 1e9)
            printf "%-5d %-16s %8.1f %9.1f %9.2f %5.0f%% | %9.1f %9.2f %5.0f%% | %-16s\n",
                r, l1, $1, $2, $3, 100 * fo, $4, $5, 100 * ft, l2
            print $1, $2, $3, fo, $4, $5, ft >> f}'
        r=$((r + 1))
    done
    [ -s "$res" ] || { echo "== $name: no round completed"; return 1; }
    m() { awk -v c="$1" '{print $c}' "$res" | median | awk '{printf "%.4g\n", $1}'; }
    bw=$(m 1) pp=$(m 2) tg=$(m 3) fr=$(m 4) lpp=$(m 5) ltg=$(m 6) lfr=$(m 7)
    echo "$name medians: corral pp512 $pp tg128 $tg t/s, $(awk "BEGIN {printf \"%.0f\", 100 * $fr}")% of" \
         "the bandwidth limit (bw $bw GB/s) | llama-bench pp512 $lpp tg128 $ltg t/s," \
         "$(awk "BEGIN {printf \"%.0f\", 100 * $lfr}")% | load now $(load_avg)"
    awk -v t="$name" -v pp="$pp" -v tg="$tg" -v lpp="$lpp" -v ltg="$ltg" -v fr="$fr" \
        -v pmin="$pp_min" -v fmin="$fr_min" 'BEGIN {
        rt = tg / ltg; rp = pp / lpp
        ok_t = (rt >= 1.10); ok_p = (rp >= pmin); ok_f = (fr >= fmin)
        printf "%s verdict: tg128 %.2fx (>= 1.10) %s; pp512 %.2fx (>= %.2f) %s; decode %.0f%% of bandwidth (>= %.0f%%) %s\n",
            t, rt, (ok_t ? "PASS" : "FAIL"), rp, pmin, (ok_p ? "PASS" : "FAIL"),
            100 * fr, 100 * fmin, (ok_f ? "PASS" : "FAIL")
        exit (ok_t && ok_p && ok_f) ? 0 : 1}' || return 1
    return $bad
}

#!/bin/sh
# symbol_prefixes.sh: every global symbol a library defines starts with a
# prefix of its module (docs/architecture.md, "Symbol prefixes").
#
#   symbol_prefixes.sh LIB=ARCHIVE... [--objects ROOT LIST]...
#
# LIB=ARCHIVE checks the archive against LIB's row of the table below.
# --objects ROOT LIST checks each object file named in LIST (one path a
# line) against the row of its source folder: the part of its path after
# ROOT (CMake's <target>.dir/), e.g. "model" for model/forward.c.o, "."
# for the top. Fails naming each symbol outside its module's prefixes, each
# object in a folder the table lacks, and any prefix two modules share.
# A prefix ending in "_" matches every name it starts; one that does not is
# a whole name.
set -u

table='
lib:corral_lib            cr_
lib:corral_proto          msg_ bus_
lib:corral_gateway_core   gw_
lib:corral_scheduler_core sch_
lib:corral_registry_core  reg_
lib:corral_node_core      nd_
lib:corral_cli_core       cli_
lib:corral_synth          rn_synth_
runner:.                  rn_backend_ rn_backends rn_engine_ rn_server_ rn_sampler_ rn_logprobs_ rn_rng_ rn_tool_ rn_script_ rn_testhook_ rn_spec_ rn_pace_ rn_direct_
runner:model              rn_model_ rn_ctx_ rn_quant_ rn_quantize_ rn_moe_ rn_lora_
runner:text               rn_tok_ rn_token_ rn_tokenizer_ rn_tokenize rn_detok_ rn_detokenize rn_bpe_ rn_spm_ rn_wpm_ rn_ugm_ rn_pretok_ rn_unicode_ rn_utf8_
runner:template           rn_tmpl_ rn_val_
runner:jinja              jj_
runner:grammar            rn_grammar_
runner:prompt             rn_prompt_
runner:output             rn_output_ rn_stop_ rn_thinking_ rn_toolcalls_ rn_logprob_ rn_parser_
runner:vision             rn_image_ rn_clip_ rn_vision_ rn_preproc_ rn_pixtral_ rn_siglip_ rn_gemma3v_ rn_vweights_
runner:backend/cpu        be_cpu_ be_pack_ be_kvq_ be_vec_ be_avx2_ be_avx512_ be_simd_ be_type_ be_f16_ be_f32_ be_bf16_ be_q2_k_ be_q3_k_ be_q4_k_ be_q5_k_ be_iq4_nl_ be_iq4_xs_ be_mxfp4_ be_iq1_ be_iq2_ be_iq3_ be_iq_ rn_threadpool_ rn_cpu_
runner:backend/cuda       be_cuda_
'

fail=0
# No prefix may belong to two modules, nor start another module's prefix.
dup=$(printf '%s\n' "$table" | awk 'NF > 1 {
        for (i = 2; i <= NF; i++) { p[++n] = $i; m[n] = $1 }
    }
    END {
        for (i = 1; i <= n; i++) for (j = 1; j <= n; j++)
            if (i != j && m[i] != m[j] && index(p[j], p[i]) == 1 &&
                (substr(p[i], length(p[i])) == "_" || p[i] == p[j]))
                print "prefix " p[i] " (" m[i] ") also covers " p[j] " (" m[j] ")"
    }')
if [ -n "$dup" ]; then
    printf '%s\n' "$dup"
    fail=1
fi

# check TODO: TODO holds "MODULE FILE" lines (FILE an archive or an
# object). Prints "FILE[(MEMBER)]: SYMBOL (TYPE) is outside ..." for each
# global symbol outside MODULE's prefixes and each MODULE the table lacks;
# returns 1 if any.
check() {
    # shellcheck disable=SC2046 # file names: one word each
    nm -g --defined-only -A $(awk '{ print $2 }' "$1") 2>/dev/null |
    awk -v table="$table" -v todo="$1" '
        BEGIN {
            n = split(table, rows, "\n")
            for (i = 1; i <= n; i++)
                if (split(rows[i], f, " ") > 1) {
                    pre[f[1]] = rows[i]
                    sub(/^[^ ]+ +/, "", pre[f[1]])
                }
            while ((getline line < todo) > 0) {
                split(line, f, " ")
                mod[f[2]] = f[1]
                if (!(f[1] in pre)) {
                    print f[2] ": module " f[1] " has no row in the prefix table"
                    bad = 1
                }
            }
        }
        NF >= 3 {
            k = split($1, loc, ":")        # FILE:ADDR or ARCHIVE:MEMBER:ADDR
            file = loc[1]; m = mod[file]
            if (!(m in pre)) next
            where = k > 2 ? file "(" loc[2] ")" : file
            sym = $NF; np = split(pre[m], p, " "); ok = 0
            # the sanitizers name their own globals after ours
            if (sym ~ /^__(odr_asan|asan_|ubsan_)/) next
            for (i = 1; i <= np; i++)
                if ((substr(p[i], length(p[i])) == "_" && index(sym, p[i]) == 1) ||
                    sym == p[i]) { ok = 1; break }
            if (!ok) {
                printf "%s: %s (%s) is outside the prefixes of %s: %s\n",
                       where, sym, $(NF - 1), m, pre[m]
                bad = 1
            }
        }
        END { exit bad }'
}

todo=""
while [ $# -gt 0 ]; do
    case "$1" in
    --objects)
        # "runner:<folder> <object>" for each object: the folder is the path
        # after ROOT without the file name ("." for the top).
        todo="$todo$(awk -v root="$2/" '
            NF && index($0, root) == 1 {
                rel = substr($0, length(root) + 1)
                dir = rel; sub(/\/[^\/]*$/, "", dir)
                if (dir == rel) dir = "."
                print "runner:" dir, $0
                next
            }
            NF { print "runner:? " $0 }' "$3")
"
        shift 3
        ;;
    *=*)
        todo="$todo""lib:${1%%=*} ${1#*=}
"
        shift
        ;;
    *)
        echo "usage: $0 LIB=ARCHIVE... [--objects ROOT LIST]..." >&2
        exit 2
        ;;
    esac
done
todo_file=$(mktemp) || exit 2
trap 'rm -f "$todo_file"' EXIT
printf '%s' "$todo" >"$todo_file"
check "$todo_file" || fail=1
[ $fail -eq 0 ] && echo "symbol prefixes: ok"
exit $fail

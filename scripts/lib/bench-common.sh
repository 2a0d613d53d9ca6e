# What the benchmark scripts share (sourced by scripts/bench-*.sh; not run on its own).
#
#   bench_init NAME            say/die/usage_error with NAME as prefix; LC_ALL=C; $root, $data,
#                              $models, $cache, $venv from XSENT_DATA, XSENT_MODELS, XSENT_CACHE
#   bench_help                 print the calling script's header comment (its --help)
#   bench_models SPEC ORDER..  set $keys from --models e5|minilm|all (all = ORDER)
#   bench_positive_int FLAG V  die unless V is a positive integer
#   bench_threads N            the same thread limits for xsent, torch, ORT, faiss; offline hub
#   bench_tatoeba_input DIR N  $input = the first N lines of tatoeba.deu-eng.eng and of .deu
#                              (2N sentences), $one = its first line; sets $n
#   bench_best_seconds R CMD.. best wall time (s) of CMD over R runs; CMD's output goes to
#                              $work/last.log, shown if it fails
#   bench_json_field JSON KEY  one field of a JSON object (python3: no jq on every machine)
#   bench_machine              "CPU: model; flags: …" (the flags that decide the kernels)
#   bench_load                 the load average (1, 5, 15 minutes)
#   bench_cos_below MIN        true when MIN, two engines' lowest cosine for one sentence, is
#                              below $bench_min_cos (BENCH_MIN_COS, default 0.999): they did not
#                              embed the same text the same way
#   model_name / model_prefix / model_maxlen KEY   the benchmark models (e5, minilm)
#
# One place for these keeps the scripts' flags, defaults and reports the same; each script keeps
# what it measures.

bench_init() {
    bench_name="$1"
    export LC_ALL=C
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    data="${XSENT_DATA:-$root/../shared/data}"
    models="${XSENT_MODELS:-$root/models}"
    cache="${XSENT_CACHE:-$HOME/.cache/xsent}"
    venv="$cache/bench-venv"
}

say() { printf '%s: %s\n' "$bench_name" "$*" >&2; }
die() { printf '%s: error: %s\n' "$bench_name" "$*" >&2; exit 1; }
usage_error() { printf '%s: %s (try --help)\n' "$bench_name" "$*" >&2; exit 64; }

# The header comment of the script that sourced this file, up to its `set -` line.
bench_help() {
    sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

bench_models() {
    local spec="$1"
    shift
    case "$spec" in
        e5) keys=(e5) ;;
        minilm) keys=(minilm) ;;
        all) keys=("$@") ;;
        *) usage_error "--models must be e5, minilm or all (got '$spec')" ;;
    esac
}

bench_positive_int() {
    [[ "$2" =~ ^[1-9][0-9]*$ ]] || usage_error "$1 must be a positive integer (got '$2')"
}

bench_threads() {
    threads="$1"
    export XSENT_THREADS="$threads" RAYON_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads" \
        MKL_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads"
    export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
}

model_name() { case "$1" in e5) echo multilingual-e5-small ;; minilm) echo all-MiniLM-L6-v2 ;; esac; }
model_prefix() { case "$1" in e5) echo "query: " ;; minilm) echo "" ;; esac; }
model_maxlen() { case "$1" in e5) echo 512 ;; minilm) echo 256 ;; esac; }

# Every benchmark model the keys name must exist (scripts/setup.sh makes them).
bench_check_models() {
    local k d f
    for k in "${keys[@]}"; do
        d="$models/$(model_name "$k")"
        for f in config.json model.safetensors tokenizer.json modules.json; do
            [ -f "$d/$f" ] || die "model $(model_name "$k") is missing ($d/$f not found): run scripts/setup.sh first"
        done
    done
}

bench_tatoeba_input() {
    local dir="$1" per_lang="$2"
    local eng="$data/tatoeba/tatoeba.deu-eng.eng" deu="$data/tatoeba/tatoeba.deu-eng.deu"
    [ -f "$eng" ] && [ -f "$deu" ] || die "tatoeba data not found under $data/tatoeba (set XSENT_DATA)"
    input="$dir/sentences.txt"
    one="$dir/one.txt"
    { head -n "$per_lang" "$eng"; head -n "$per_lang" "$deu"; } > "$input"
    n="$(wc -l < "$input")"
    [ "$n" -eq $((2 * per_lang)) ] || die "expected $((2 * per_lang)) sentences in $input, got $n"
    head -n 1 "$input" > "$one"
}

bench_best_seconds() {
    local repeat="$1" best="" t0 t1 dt i
    shift
    for ((i = 0; i < repeat; i++)); do
        t0="$EPOCHREALTIME"
        "$@" > "$work/last.log" 2>&1 || { cat "$work/last.log" >&2; die "failed: $*"; }
        t1="$EPOCHREALTIME"
        dt="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", b - a }')"
        best="$(awk -v a="$best" -v b="$dt" 'BEGIN { if (a == "" || b < a) print b; else print a }')"
    done
    echo "$best"
}

bench_json_field() {
    python3 -c 'import json, sys; v = json.loads(sys.argv[1])[sys.argv[2]]; print("" if v is None else v)' "$1" "$2"
}

bench_machine() {
    printf 'CPU: %s; flags: %s' "$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)" \
        "$(grep -o -w -E 'avx2|fma|avx512f|avx512bw|avx512vl|avx512_vnni|avx_vnni|avx512_bf16|amx_int8|amx_bf16' /proc/cpuinfo | sort -u | paste -sd' ')"
}

bench_load() { cut -d' ' -f1-3 /proc/loadavg; }

bench_min_cos="${BENCH_MIN_COS:-0.999}"
bench_cos_below() { awk -v a="$1" -v b="$bench_min_cos" 'BEGIN { exit !(a < b) }'; }

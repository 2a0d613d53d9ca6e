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
#   bench_machine              one line: "CPU: model (family F, model M, stepping S); N CPUs, …;
#                              flags: …" (the flags that decide the kernels)
#   bench_provenance [BIN..]   what every bench script prints with its numbers: bench_machine's
#                              line, each xsent binary's --version and sha256 (first 12 hex
#                              digits), and `git rev-parse --short HEAD` of this checkout with
#                              "+dirty" when tracked files have changes
#   bench_load                 the load average (1, 5, 15 minutes)
#   bench_num LABEL V / bench_pos LABEL V   die unless V is a number (bench_pos: above 0); for
#                              every value parsed from an engine's output before it is used
#   bench_rate_words R / bench_time_words R   "faster", "slower" or "the same to 2 places" for a
#                              ratio R of xsent's rate to the peer's (above 1: faster) or of
#                              xsent's time to the peer's (below 1: faster). Every script says its
#                              ratio in words, e.g. "xsent 1.48× torch's sentences/s (faster)"
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

say() { printf '%s: %s\n' "${bench_name:-bench}" "$*" >&2; }
die() { printf '%s: error: %s\n' "${bench_name:-bench}" "$*" >&2; exit 1; }
usage_error() { printf '%s: %s (try --help)\n' "${bench_name:-bench}" "$*" >&2; exit 64; }

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
    local info field
    info="$(LC_ALL=C lscpu 2>/dev/null)"
    field() { sed -n "s/^$1: *//p" <<<"$info" | head -n 1; }
    printf 'CPU: %s (family %s, model %s, stepping %s); %s CPUs, %s usable here (nproc); flags: %s' \
        "$(field 'Model name')" "$(field 'CPU family')" "$(field 'Model')" "$(field 'Stepping')" \
        "$(field 'CPU(s)')" "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" \
        "$(grep -o -w -E 'avx2|fma|avx512f|avx512bw|avx512vl|avx512_vnni|avx_vnni|avx512_bf16|amx[a-z0-9_]*' /proc/cpuinfo | sort -u | paste -sd' ')"
    unset -f field
}

bench_provenance() {
    local r b v sha head dirty
    r="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    bench_machine
    echo
    for b in "$@"; do
        v="$("$b" --version 2>/dev/null | head -n 1)" || v=""
        sha="$(sha256sum "$b" 2>/dev/null | cut -c1-12)" || sha=""
        echo "binary: $b (${v:-no --version}; sha256 ${sha:-?})"
    done
    if head="$(git -C "$r" rev-parse --short HEAD 2>/dev/null)"; then
        # --no-optional-locks: status reads the tree without refreshing .git/index.
        dirty="$(git -C "$r" --no-optional-locks status --porcelain --untracked-files=no 2>/dev/null | head -n 1)"
        echo "checkout: $r at $head${dirty:+"+dirty"}${XSENT_BIN:+" (XSENT_BIN given: the binary need not be this checkout's build)"}"
    else
        echo "checkout: $r (not a git checkout: commit unknown)"
    fi
}

bench_load() { cut -d' ' -f1-3 /proc/loadavg; }

bench_num() {
    [[ "$2" =~ ^[+-]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][+-]?[0-9]+)?$ ]] \
        || die "$1: expected a number, got '$2' (the run above failed or printed something else)"
}
bench_pos() {
    bench_num "$1" "$2"
    awk -v v="$2" 'BEGIN { exit !(v > 0) }' || die "$1: expected a number above 0, got $2"
}
bench_rate_words() { awk -v r="$1" 'BEGIN { r = sprintf("%.2f", r) + 0; print (r > 1) ? "faster" : (r < 1) ? "slower" : "the same to 2 places" }'; }
bench_time_words() { awk -v r="$1" 'BEGIN { r = sprintf("%.2f", r) + 0; print (r < 1) ? "faster" : (r > 1) ? "slower" : "the same to 2 places" }'; }

bench_min_cos="${BENCH_MIN_COS:-0.999}"
bench_cos_below() { awk -v a="$1" -v b="$bench_min_cos" 'BEGIN { exit !(a < b) }'; }

#!/usr/bin/env bash
# The benchmark cost of a reduced dtype: xsent's evaluations with --dtype DTYPE beside f32, on
# the real models, one table. Bounds: int8 and bf16 on the CPU within 0.5 of f32 (issue 45);
# the GPU's bf16/f16 code path within 0.2 (issue 41).
#
# usage: scripts/check-dtype.sh [--models e5|minilm|all] [--dtypes int8,bf16,gpu-bf16,gpu-f16]
#                               [--tasks tatoeba,sts17,bucc] [--quick] [--out DIR]
#                               [--f32-reports DIR]
#
#   --dtypes     int8 and bf16 are the CPU's kernels; gpu-bf16 and gpu-f16 run the code path a
#                GPU runs (the whole encoder in bf16/f16 on candle's ops, XSENT_KERNELS=candle)
#                on the CPU: the same arithmetic as cuBLAS's (half inputs, f32 sums, half
#                outputs) where the model's weights cannot travel to a GPU machine
#   --tasks      which evaluations (default all three; bucc runs for e5 only)
#   --quick      Tatoeba deu,fra and STS 2017 only (minutes, not hours)
#   --out        where the reports go (default /tmp/xsent-check-dtype)
#   --f32-reports DIR   reuse DIR/eval-{tatoeba,sts17,bucc}.json[.gz] as the f32 side (say so)
#
# Full run: Tatoeba (every language present: 90), every STS 2017 set, BUCC zh-en F1 (all
# sets of the model, e5 only for BUCC: MiniLM is English-only). On 2 cores a full e5-small pass
# takes about 20 minutes per dtype (f32: Tatoeba 859 s, STS 55 s, BUCC 264 s).
#
# Environment: XSENT_BIN (default target/release/xsent), XSENT_DATA, XSENT_MODELS, XSENT_THREADS.
set -uo pipefail
# shellcheck source=lib/bench-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/bench-common.sh"
bench_init check-dtype
xsent="${XSENT_BIN:-$root/target/release/xsent}"
spec=all dtypes=int8,bf16,gpu-bf16 quick=0 out=/tmp/xsent-check-dtype f32dir="" only=tatoeba,sts17,bucc
while [ $# -gt 0 ]; do
    case "$1" in
        --models) spec="${2:-}"; shift 2 ;;
        --dtypes) dtypes="${2:-}"; shift 2 ;;
        --quick) quick=1; shift ;;
        --tasks) only="${2:-}"; shift 2 ;;
        --out) out="${2:-}"; shift 2 ;;
        --f32-reports) f32dir="${2:-}"; shift 2 ;;
        -h|--help) bench_help; exit 0 ;;
        *) usage_error "unknown argument: $1" ;;
    esac
done
bench_models "$spec" e5 minilm
bench_check_models
IFS=, read -r -a dts <<<"$dtypes"
for d in "${dts[@]}"; do
    case "$d" in int8|bf16|gpu-bf16|gpu-f16) ;; *) usage_error "--dtypes: $d is not int8, bf16, gpu-bf16 or gpu-f16" ;; esac
done
for t in ${only//,/ }; do
    case "$t" in tatoeba|sts17|bucc) ;; *) usage_error "--tasks: $t is not tatoeba, sts17 or bucc" ;; esac
done
[ -x "$xsent" ] || die "no xsent binary at $xsent (cargo build --release, or set XSENT_BIN)"
[ -d "$data/tatoeba" ] || die "no $data/tatoeba (set XSENT_DATA)"
[ -z "$f32dir" ] || [ -d "$f32dir" ] || die "--f32-reports $f32dir is not a directory"
py="$(command -v python3)" || die "python3 is needed to read the reports"
mkdir -p "$out" || die "cannot create $out"

# The tasks: name and eval arguments.
tasks=("tatoeba|tatoeba" "sts17|sts")
[ "$quick" = 1 ] && tasks=("tatoeba|tatoeba --langs deu,fra" "sts17|sts")

say "$(bench_machine); load $(bench_load)"
for k in "${keys[@]}"; do
    m="$models/$(model_name "$k")"
    prefix="$(model_prefix "$k")"
    t=("${tasks[@]}")
    [ "$k" = e5 ] && [ "$quick" = 0 ] && t+=("bucc|bucc")
    for side in f32 "${dts[@]}"; do
        for task in "${t[@]}"; do
            name="${task%%|*}" args="${task#*|}"
            [[ ",$only," == *",$name,"* ]] || continue
            rep="$out/$k-$side-$name.json"
            if [ "$side" = f32 ] && [ -n "$f32dir" ]; then
                src="$(ls "$f32dir/eval-$name.json" "$f32dir/eval-$name.json.gz" 2>/dev/null | head -n1)"
                [ -n "$src" ] || die "no eval-$name.json[.gz] in $f32dir"
                case "$src" in *.gz) gzip -dc "$src" >"$rep" ;; *) cp "$src" "$rep" ;; esac
                continue
            fi
            [ -s "$rep" ] && continue # a finished report of an earlier run in --out
            env=() flag=(--dtype f32)
            case "$side" in
                int8|bf16) flag=(--dtype "$side") ;;
                gpu-*) env=(XSENT_KERNELS=candle) flag=(--dtype "${side#gpu-}") ;;
            esac
            t0=$(date +%s)
            # shellcheck disable=SC2086
            env "${env[@]}" "$xsent" eval $args -m "$m" --prefix "$prefix" --data-dir "$data" "${flag[@]}" \
                --report "$rep.tmp" >"$out/$k-$side-$name.log" 2>&1 \
                || { tail -n3 "$out/$k-$side-$name.log" >&2; die "$k $side $name failed (log: $out/$k-$side-$name.log)"; }
            mv "$rep.tmp" "$rep"
            say "$k $side $name: $(( $(date +%s) - t0 )) s"
        done
    done
done

# The table: per model, task and set, f32 and each dtype, the difference and its bound.
"$py" - "$out" "$quick" "${keys[*]}" "${dts[*]}" <<'EOF'
import json, os, sys
out, quick, keys, dts = sys.argv[1], sys.argv[2] == "1", sys.argv[3].split(), sys.argv[4].split()
bound = {"int8": 0.5, "bf16": 0.5, "gpu-bf16": 0.2, "gpu-f16": 0.2}
def scores(k, side, task):
    p = os.path.join(out, f"{k}-{side}-{task}.json")
    if not os.path.exists(p):
        return None
    d = json.load(open(p))
    r = {x["language"]: x["main_score"] for x in d["results"]}
    if task == "tatoeba":
        avg = d.get("extra", {}).get("average")
        return {f"average ({len(r)} languages)": avg if avg is not None else sum(r.values()) / len(r)}
    return r
print(f"{'model':8} {'task':8} {'set':26} {'f32':>7} " + " ".join(f"{d:>9} {'diff':>6}" for d in dts) + "  within bound")
fails = 0
for k in keys:
    for task in ("tatoeba", "sts17", "bucc"):
        ref = scores(k, "f32", task)
        if ref is None:
            continue
        for s in ref:
            cells, ok = [], True
            for d in dts:
                o = scores(k, d, task)
                if o is None or s not in o:
                    cells.append(f"{'-':>9} {'-':>6}")
                    continue
                diff = o[s] - ref[s]
                ok &= abs(diff) <= bound[d]
                cells.append(f"{o[s]:9.2f} {diff:+6.2f}")
            fails += not ok
            print(f"{k:8} {task:8} {s:26} {ref[s]:7.2f} " + " ".join(cells) + ("  yes" if ok else "  NO"))
print(f"bounds: " + ", ".join(f"{d} {bound[d]}" for d in dts) + f"; rows outside: {fails}")
sys.exit(1 if fails else 0)
EOF

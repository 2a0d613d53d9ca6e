#!/usr/bin/env bash
# The host's cost of a training step on the GPU's code path, measured on the CPU: two xsent builds
# side by side (alternating runs), each with the GPU's code paths (`XSENT_KERNELS=gpu`: what a GPU
# runs, xsent's CPU kernels standing in for its CUDA ones; builds before 2026-11-28 know only
# `candle`, candle's ops for every op, which was then the GPU's path), one thread,
# a random 12-layer BERT so narrow (8 wide, `max_length` 16, batch 4 pairs) that the arithmetic is
# negligible and what remains is the cost of issuing each op. On a GPU each op also costs a launch
# and an allocation, so fewer ops here means fewer there (docs/gpu.md, "Fewer ops per step").
#
#   scripts/bench-train-host.sh --base OLD_XSENT [--new NEW_XSENT] [--runs 3] [--steps 60]
#                               [--base-kernels candle] [--new-kernels gpu] [--precision f32|bf16]
#
# `--precision bf16` trains both builds with `train.precision = "bf16"` (bf16 training's ops).
#
# Prints per run the medians over steps 3.. of forward, backward and step seconds (metrics.jsonl),
# then the new build's backward and step time ÷ the base's, in words ("the new build's backward
# takes 0.726x the base's time (faster)"; below 1: the new build is faster), and the machine, both
# binaries and this checkout's commit. A failed run or a missing time stops it (exit 1). Needs a Python with
# transformers to write the random model (XSENT_PYTHON; default the benchmarks' venv), XSENT_MODELS with
# all-MiniLM-L6-v2 (its tokenizer, and the distillation teacher) and XSENT_DATA with xnli.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/bench-common.sh
. "$root/scripts/lib/bench-common.sh"
bench_name=bench-train-host
base="" new="$root/target/release/xsent" runs=3 steps=60 base_kernels=candle new_kernels=gpu precision=f32
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base=$2; shift 2 ;;
    --new) new=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --base-kernels) base_kernels=$2; shift 2 ;;
    --new-kernels) new_kernels=$2; shift 2 ;;
    --precision) precision=$2; shift 2 ;;
    *) echo "usage: $0 --base OLD_XSENT [--new NEW_XSENT] [--runs N] [--steps N] [--base-kernels K] [--new-kernels K] [--precision f32|bf16]" >&2; exit 2 ;;
  esac
done
case "$precision" in f32|bf16) ;; *) echo "--precision: f32 or bf16, not $precision" >&2; exit 2 ;; esac
[ -n "$base" ] || { echo "give --base: the xsent binary to compare against" >&2; exit 2; }
for b in "$base" "$new"; do [ -x "$b" ] || { echo "no xsent binary at $b" >&2; exit 1; }; done
export XSENT_MODELS="${XSENT_MODELS:-$root/models}" XSENT_DATA="${XSENT_DATA:-$root/../shared/data}"
teacher="$XSENT_MODELS/all-MiniLM-L6-v2"
[ -e "$teacher/tokenizer.json" ] || { echo "missing $teacher (run scripts/setup.sh)" >&2; exit 1; }
[ -d "$XSENT_DATA/xnli" ] || { echo "missing $XSENT_DATA/xnli (set XSENT_DATA)" >&2; exit 1; }
py="${XSENT_PYTHON:-${XSENT_CACHE:-$HOME/.cache/xsent}/bench-venv/bin/python}"
"$py" -c 'import transformers' 2>/dev/null \
  || { echo "$py has no transformers: run scripts/bench-train.sh once (it makes the bench venv) or set XSENT_PYTHON" >&2; exit 1; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$py" - "$work/bert" "$teacher" <<'PY'
import shutil, sys, torch
from transformers import BertConfig, BertModel
out, teacher = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
cfg = BertConfig(vocab_size=30522, hidden_size=8, num_hidden_layers=12, num_attention_heads=2,
                 intermediate_size=32, max_position_embeddings=512)
BertModel(cfg).save_pretrained(out, safe_serialization=True)
for f in ["tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"]:
    shutil.copy(f"{teacher}/{f}", f"{out}/{f}")
PY
sed -e "s#^student = .*#student = \"$work/bert\"#" -e 's#^student_prefix = .*#student_prefix = ""#' \
    -e 's#^projection_fit_size = .*#projection_fit_size = 500#' -e 's#^max_length = .*#max_length = 16#' \
    "$root/configs/distill-direct.toml" > "$work/distill.toml"
bench_provenance "$base" "$new"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "base: $base (XSENT_KERNELS=$base_kernels); new: $new (XSENT_KERNELS=$new_kernels); train.precision $precision"
one() { # BIN TAG KERNELS -> "forward backward step" medians
  rm -rf "$work/$2"
  XSENT_KERNELS=$3 XSENT_THREADS=1 RAYON_NUM_THREADS=1 XSENT_CACHE="$work/cache" "$1" train \
    --config "$work/distill.toml" --out "$work/$2" --set train.max_steps="$steps" --set train.log_every=1 \
    --set train.eval_at_start=false --unset train.val_sts --set train.checkpoint_every=0 \
    --set train.batch_size=4 --set train.shard_size=4 --set optim.warmup_steps=1 \
    --set train.precision="\"$precision\"" >/dev/null 2>"$work/$2.err" \
    || { tail -5 "$work/$2.err" >&2; die "xsent train ($2, $1) failed"; }
  python3 - "$work/$2/metrics.jsonl" <<'PY'
import json, statistics as st, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if "loss" in r and r["step"] >= 3]
if not rows:
    sys.exit(f"no steps from step 3 on in {sys.argv[1]}")
print(" ".join(f"{st.median(r[k] for r in rows):.6f}" for k in ("forward_s", "backward_s", "step_s")))
PY
}
# one's three medians, each a number above 0, or stop
check3() { bench_pos "$1 forward" "$2"; bench_pos "$1 backward" "$3"; bench_pos "$1 step" "$4"; }
declare -a bb nb bs ns
for i in $(seq "$runs"); do
  f="" b="" s=""
  read -r f b s < <(one "$base" "base-$i" "$base_kernels") || true; check3 "run $i base" "$f" "$b" "$s"
  echo "run $i base: forward ${f}s backward ${b}s step ${s}s"; bb+=("$b"); bs+=("$s")
  f="" b="" s=""
  read -r f b s < <(one "$new" "new-$i" "$new_kernels") || true; check3 "run $i new" "$f" "$b" "$s"
  echo "run $i new:  forward ${f}s backward ${b}s step ${s}s"; nb+=("$b"); ns+=("$s")
done
python3 - "${bb[*]}" "${nb[*]}" "${bs[*]}" "${ns[*]}" <<'PY'
import statistics as st, sys
bb, nb, bs, ns = ([float(x) for x in a.split()] for a in sys.argv[1:5])
def words(r):
    r = round(r, 3)
    return "faster" if r < 1 else "slower" if r > 1 else "the same to 3 places"
b, s = st.median(nb) / st.median(bb), st.median(ns) / st.median(bs)
print(f"new/base, median of runs: backward {b:.3f}, step {s:.3f}")
print(f"the new build's backward takes {b:.3f}x the base's time ({words(b)}), its step {s:.3f}x ({words(s)})")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

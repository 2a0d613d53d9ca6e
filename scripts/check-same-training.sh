#!/usr/bin/env bash
# Same training to the bit: train each recipe for a few steps on tiny data with fixed seeds and
# one thread, and print `recipe sha256` of the final weights (plus `embed sha256` of a real
# model's vectors for a fixed file). Compare two builds' outputs with diff; the hashes depend on
# the CPU, so keep a baseline per machine.
#   scripts/check-same-training.sh [--bin BIN] [--out DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin="${CARGO_TARGET_DIR:-$here/target}/release/xsent"
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--bin BIN] [--out DIR]" >&2; exit 2 ;;
  esac
done
bin=$(realpath "$bin")
[ -x "$bin" ] || { echo "no xsent binary at $bin (build it: cargo build --release, or pass --bin)" >&2; exit 1; }
fixtures=${XSENT_FIXTURES:-$here/../shared/fixtures}
data=${XSENT_DATA:-$here/../shared/data}
models=${XSENT_MODELS:-$here/models}
e5="$models/multilingual-e5-small"
for p in "$fixtures/tiny-bert" "$fixtures/tiny-xlm-roberta" "$data/xnli" "$e5/model.safetensors"; do
  [ -e "$p" ] || { echo "missing $p (set XSENT_FIXTURES, XSENT_DATA, XSENT_MODELS or run scripts/setup.sh)" >&2; exit 1; }
done
if [ -z "$out" ]; then out=$(mktemp -d); trap 'rm -rf "$out"' EXIT; fi
mkdir -p "$out"; out=$(realpath "$out"); rm -rf "$out/cache"
export XSENT_THREADS=1 RAYON_NUM_THREADS=1 XSENT_CACHE="$out/cache"

# Tiny inputs: fixture checkpoints with a word-level tokenizer, synthetic pairs and "XNLI".
python3 - "$out" "$fixtures" <<'PY'
import json, os, shutil, sys
out, fx = sys.argv[1], sys.argv[2]
en = [f"e{i}" for i in range(60)]; de = [f"d{i}" for i in range(60)]
vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]"])}
for i, w in enumerate(en + de): vocab[w] = i + 4
tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
       "pre_tokenizer": {"type": "Whitespace"},
       "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
       "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}}
for m in ["tiny-bert", "tiny-xlm-roberta"]:
    os.makedirs(f"{out}/{m}", exist_ok=True)
    for f in ["config.json", "model.safetensors"]: shutil.copy(f"{fx}/{m}/{f}", f"{out}/{m}/{f}")
    json.dump(tok, open(f"{out}/{m}/tokenizer.json", "w"))
x = 12345
def r():
    global x
    x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
    return x >> 33
def sent():
    ids = [r() % 60 for _ in range(3 + r() % 6)]
    return " ".join(en[i] for i in ids), " ".join(de[i] for i in ids)
with open(f"{out}/pairs.tsv", "w") as f:
    for _ in range(200): f.write("%s\t%s\n" % sent())
os.makedirs(f"{out}/xnli", exist_ok=True)
with open(f"{out}/xnli/dev-en.tsv", "w") as fe, open(f"{out}/xnli/dev-de.tsv", "w") as fd:
    for _ in range(40):
        (pe, pd), (he, hd) = sent(), sent()
        fe.write(f"{pe}\t{he}\tneutral\n"); fd.write(f"{pd}\t{hd}\tneutral\n")
with open(f"{out}/val.en", "w") as fe, open(f"{out}/val.de", "w") as fd:
    for _ in range(30):
        e, d = sent(); fe.write(e + "\n"); fd.write(d + "\n")
PY

tsv="[[data.sources]]
kind = \"tsv\"
path = \"$out/pairs.tsv\"
src_lang = \"en\"
tgt_lang = \"de\""
train="[train]
max_steps = 4
batch_size = 8
log_every = 1
eval_every = 2
checkpoint_every = 2
keep_last = 2"

cat > "$out/distill.toml" <<T
recipe = "distill"
seed = 7
[distill]
teacher = "$out/tiny-bert"
student = "$out/tiny-xlm-roberta"
max_length = 16
projection_fit_size = 100
$train
grad_accum = 2
[optim]
lr = 1e-3
warmup_steps = 2
[data]
val_size = 16
$tsv
T
cat > "$out/dueam.toml" <<T
recipe = "dueam"
seed = 7
[dueam]
anchor = "$out/tiny-bert"
learner = "$out/tiny-xlm-roberta"
max_length = 16
pairs = "weak"
xnli_dir = "$out/xnli"
splits = ["dev"]
langs = ["en", "de"]
[[dueam.val_sources]]
kind = "aligned"
src = "$out/val.en"
tgt = "$out/val.de"
src_lang = "en"
tgt_lang = "de"
$train
shard_size = 4
[optim]
lr = 1e-3
warmup_steps = 2
T
cat > "$out/lightweight.toml" <<T
recipe = "lightweight"
seed = 5
[lightweight]
vocab_size = 90
layers = 2
hidden = 32
heads = 4
ffn = 64
max_length = 16
$train
[optim]
lr = 3e-3
warmup_steps = 2
weight_decay = 0.0
[data]
val_size = 40
$tsv
T
cat > "$out/sp.toml" <<T
recipe = "sp"
seed = 3
[sp]
units = "sp"
vocab_size = 70
dim = 16
megabatch_max = 3
anneal_rate = 2
symmetric = true
$train
[optim]
lr = 1e-2
schedule = "constant"
weight_decay = 0.0
[data]
val_size = 20
$tsv
T
cat > "$out/disentangle.toml" <<T
recipe = "disentangle"
seed = 3
[disentangle]
base = "$e5"
prefix = "query: "
max_length = 32
[train]
max_steps = 2
batch_size = 8
shard_size = 4
eval_every = 2
eval_at_start = false
log_every = 1
checkpoint_every = 1000
[optim]
lr = 1e-3
weight_decay = 0.0
schedule = "constant"
[data]
val_size = 8
[[data.sources]]
kind = "xnli"
dir = "$data/xnli"
splits = ["dev"]
pivot = "en"
langs = ["de"]
max_pairs = 48
T

for r in distill dueam lightweight sp disentangle; do
  rm -rf "$out/run-$r"
  if ! "$bin" train --config "$out/$r.toml" --out "$out/run-$r" >"$out/$r.log" 2>&1; then
    echo "$r: training failed; see $out/$r.log" >&2; tail -5 "$out/$r.log" >&2; exit 1
  fi
  h=$(cd "$out/run-$r/final" && find . -name '*.safetensors' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1)
  echo "$r $h"
done
printf '%s\n' "The cat sits on the mat." "Die Katze sitzt auf der Matte." "Le chat est assis sur le tapis." "Ein Hund läuft im Park." > "$out/sentences.txt"
echo "embed $("$bin" embed --model "$e5" --input "$out/sentences.txt" 2>"$out/embed.log" | sha256sum | cut -d' ' -f1)"

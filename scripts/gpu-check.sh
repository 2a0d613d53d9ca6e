#!/usr/bin/env bash
# xsent on one NVIDIA GPU against the CPU and against PyTorch on the same card (issue 41), in
# one command of at most 8 minutes per part, ending with one table.
#
#   scripts/gpu-check.sh --pack           here (no GPU): put what the GPU machine needs into
#                                         gpu-dist/ beside build-cuda.sh's binaries, check the size
#   scripts/gpu-check.sh --dry-run        here: check gpu-dist/ and the Python side, print the plan
#   scripts/gpu-check.sh --part 1         there: correctness (tests/cuda.rs, embeddings, eval,
#                                         mine, plot, 20 training steps of every recipe vs the CPU)
#   scripts/gpu-check.sh --part 2         there: speed against torch (bench-embed-gpu.sh,
#                                         bench-train-gpu.sh) and 50 steps of each *-paper.toml
#   scripts/gpu-check.sh --part 3         there: where a training step's time goes (ncu: kernels and
#                                         GPU time per distill step, xsent and torch; ~3 minutes)
#   scripts/gpu-check.sh                  there: parts 1 and 2 (about 12 minutes: only with a budget)
#
# The GPU machine has the driver, python3 with torch (CUDA 13 wheels), transformers and
# sentence-transformers, and no network and no cargo: it gets the stripped, compressed binaries
# that build-cuda.sh made (xsent, and tests/cuda.rs built as a test binary), the fixtures, e5's
# tokenizer and the benchmark data in gpu-dist/ (carry it: the device tool's `carry` names
# gpu-dist), and makes its random-initialised models there with transformers. The CUDA
# libraries come from torch's install (nvidia/cu13/lib in its site-packages, found at run time).
#
# Results: $OUT (the device tool brings it back; else /tmp/xsent-gpu-check) gets results.jsonl
# (one JSON line per check), the logs, and table.txt; the table is printed last.
# Settings: XSENT_GPU_DIST (default gpu-dist), XSENT_GPU_WORK (default /tmp/xsent-gpu),
# XSENT_PYTHON (default python3).
#
# Rehearsal without a GPU: XSENT_GPU_REHEARSAL=1 XSENT_BIN=target/release/xsent runs every step
# with "cpu" where the GPU would be (small models, torch on the CPU, no tests/cuda.rs): the
# plumbing (flags, configs, comparisons, the table) is checked; its numbers mean nothing.
set -uo pipefail
export LC_ALL=C.UTF-8

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
dist="${XSENT_GPU_DIST:-$root/gpu-dist}"
work="${XSENT_GPU_WORK:-/tmp/xsent-gpu}"
out="${OUT:-/tmp/xsent-gpu-check}"
py="${XSENT_PYTHON:-python3}"
helper="$root/scripts/gpu_check.py"
mode=run
part=all
rehearsal="${XSENT_GPU_REHEARSAL:-0}"
gdev=cuda
small=()
half_env=()
gpu_env=()
if [ "$rehearsal" = 1 ]; then
    gdev=cpu
    small=(--small)
    # The GPU's bf16/f16 path, on the CPU.
    half_env=(XSENT_KERNELS=candle)
    # The GPU's training paths, on the CPU (its kernels standing in for the CUDA ones).
    gpu_env=(XSENT_KERNELS=gpu)
    export XSENT_TORCH_DEVICE=cpu XSENT_BENCH_DEVICE=cpu
fi
while [ $# -gt 0 ]; do
    case "$1" in
        --pack) mode=pack; shift ;;
        --dry-run) mode=dry; shift ;;
        --part) part="${2:-}"; shift 2 ;;
        --part=*) part="${1#*=}"; shift ;;
        -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu-check: unknown argument $1 (see --help)" >&2; exit 64 ;;
    esac
done
case "$part" in 1|2|3|all) ;; *) echo "gpu-check: --part must be 1, 2, 3 or all (got '$part')" >&2; exit 64 ;; esac

say() { printf 'gpu-check: %s\n' "$*" >&2; }
die() { printf 'gpu-check: error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- pack (here) --
if [ "$mode" = pack ]; then
    data="${XSENT_DATA:-$root/../shared/data}"
    fixtures="${XSENT_FIXTURES:-$root/../shared/fixtures}"
    e5="${XSENT_MODELS:-$root/models}/multilingual-e5-small"
    for f in xsent.xz xsent-cuda-tests.xz SHA256SUMS BUILD; do
        [ -f "$dist/$f" ] || die "$dist/$f is missing: run scripts/build-cuda.sh first"
    done
    [ -d "$data/tatoeba" ] && [ -d "$data/xnli" ] || die "no benchmark data at $data (set XSENT_DATA)"
    [ -d "$fixtures/tiny-bert" ] || die "no fixtures at $fixtures (set XSENT_FIXTURES)"
    [ -f "$e5/tokenizer.json" ] || die "no $e5/tokenizer.json (scripts/setup.sh makes it)"
    rm -rf "$dist/fixtures" "$dist/e5" "$dist/data.tar.xz"
    mkdir -p "$dist/fixtures" "$dist/e5"
    cp -r "$fixtures"/tiny-bert "$fixtures"/tiny-xlm-roberta "$dist/fixtures/"
    cp "$e5/config.json" "$e5/tokenizer_config.json" "$dist/e5/"
    xz -T2 -9 -c "$e5/tokenizer.json" >"$dist/e5/tokenizer.json.xz"
    # The data the checks read: Tatoeba, STS 2017, BUCC, XNLI, Multi30k's validation files.
    tar -C "$data" -cf - tatoeba sts bucc xnli parallel | xz -T2 -9 >"$dist/data.tar.xz"
    (cd "$dist" && sha256sum ./*.xz e5/*.xz >SHA256SUMS)
    size=$(du -sb "$dist" | cut -f1)
    say "gpu-dist: $(du -sh "$dist" | cut -f1) ($size bytes); with the working tree it must stay under 64 MiB"
    [ "$size" -lt $((56 * 1024 * 1024)) ] || die "gpu-dist is $size bytes: too large to travel with the working tree (64 MiB in all)"
    exit 0
fi

# --------------------------------------------------------------- common checks --
need=(xsent.xz xsent-cuda-tests.xz SHA256SUMS BUILD e5/config.json e5/tokenizer_config.json e5/tokenizer.json.xz data.tar.xz fixtures/tiny-bert/model.safetensors fixtures/tiny-xlm-roberta/model.safetensors)
for f in "${need[@]}"; do
    [ -e "$dist/$f" ] || die "$dist/$f is missing: run scripts/build-cuda.sh and scripts/gpu-check.sh --pack here, and carry gpu-dist"
done
(cd "$dist" && sha256sum --quiet -c SHA256SUMS) || die "$dist does not match its SHA256SUMS: pack it again"
"$py" -c 'import torch, transformers, sentence_transformers, numpy' 2>/dev/null \
    || die "$py lacks torch, transformers, sentence-transformers or numpy (XSENT_PYTHON names another python)"

if [ "$mode" = dry ]; then
    say "dry run: gpu-dist is complete ($(du -sh "$dist" | cut -f1)); $(head -n1 "$dist/BUILD")"
    mkdir -p "$work/dry"
    xz -dc "$dist/e5/tokenizer.json.xz" >"$work/dry/tokenizer.json" || die "cannot unpack the tokenizer"
    cp "$dist/e5/config.json" "$dist/e5/tokenizer_config.json" "$work/dry/"
    "$py" "$helper" models --out "$work/dry/models" --e5 "$work/dry" --small >/dev/null || die "making the (small) models failed"
    for p in configs/*-paper.toml; do
        "$py" "$helper" paper-config --paper "$p" --model "$work/dry/models/xlmr-base" --data "$work/data" --out "$work/dry/$(basename "$p")" \
            || die "cannot derive a 50-step config from $p"
    done
    say "made small random models ($(ls "$work/dry/models" | tr '\n' ' ')) and 50-step configs of $(ls configs/*-paper.toml | wc -l) paper configs"
    cat >&2 <<EOF
gpu-check: the plan on the GPU machine (each step has its own time limit; a failed step is a row of the table, the rest runs on):
  both parts: nvidia-smi finds a GPU; python3 finds libcublas.so.13, libcublasLt.so.13, libcurand.so.10, libnvrtc.so.13
              and libcudart.so.13 in torch's install (LD_LIBRARY_PATH); the binaries unpack and ldd resolves them
  part 1 (~5 min): tests/cuda.rs (encoder passes, lightweight losses on column slices, AdamW kernel, dropout, kNN, sp)
              models e5s, e5s-teacher, xlmr-base (random, transformers); 2,000 Tatoeba sentences embedded on CPU
              and GPU (min cosine >= 0.99999) and by torch on the GPU; eval tatoeba/sts/bucc/xsr, mine and
              plot pca on the GPU against the CPU; 20 steps of distill, dueam, lightweight, sp, disentangle
              on the tiny fixtures, and of distill and dueam on e5s, CPU against GPU (losses within 1e-4);
              the e5s distill steps again with train.precision = "bf16" (losses within 1 % of f32, not equal),
              and once more under XSENT_PROFILE (the CPU's time by function: host-profile-distill-e5s.txt)
  part 2 (~6 min): bench-embed-gpu.sh (20,000 sentences, e5s and xlmr-base, xsent vs sentence-transformers),
              bench-train-gpu.sh (distill and DuEAM steps in f32 and distill in bf16, e5s, vs torch;
              bf16: train.precision against torch.autocast), 50 steps of each *-paper.toml
              (step time, peak GPU memory)
EOF
    exit 0
fi

if [ "$rehearsal" != 1 ]; then
    command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 \
        || die "no NVIDIA GPU here (nvidia-smi finds none): run this on the GPU machine (scripts/gpu-check.sh --dry-run checks the files here)"
fi
mkdir -p "$out" "$work/bin"
results="$out/results.jsonl"
: >"$results"
started=$(date +%s)

# record CHECK RESULT TARGET OK(true|false|null) SECONDS
record() {
    "$py" -c 'import json,sys; a=sys.argv; print(json.dumps({"check":a[1],"result":a[2],"target":a[3],"ok":json.loads(a[4]),"secs":a[5]}))' \
        "$1" "$2" "$3" "$4" "$5" >>"$results"
    say "$1: $2 ($([ "$4" = true ] && echo ok || ([ "$4" = null ] && echo measured || echo FAILED)))"
}

# CUDA libraries: torch's (nvidia/cu13/lib and the per-library nvidia/*/lib of its wheels), then
# a system toolkit's.
if [ "$rehearsal" = 1 ]; then
    [ -x "${XSENT_BIN:-}" ] || die "a rehearsal needs XSENT_BIN (a CPU build of xsent)"
    xsent="$XSENT_BIN"
else
libs="$("$py" - <<'EOF'
import glob, os, site, sys
need = ["libcublas.so.13", "libcublasLt.so.13", "libcurand.so.10", "libnvrtc.so.13", "libcudart.so.13"]
bases = site.getsitepackages() + [site.getusersitepackages()] + sys.path
dirs = []
for b in bases:
    for d in glob.glob(os.path.join(b, "nvidia", "cu13", "lib")) + glob.glob(os.path.join(b, "nvidia", "*", "lib")) + ["/usr/local/cuda/lib64"]:
        if os.path.isdir(d) and d not in dirs and any(os.path.exists(os.path.join(d, n)) for n in need):
            dirs.append(d)
missing = [n for n in need if not any(os.path.exists(os.path.join(d, n)) for d in dirs)]
if missing:
    sys.exit("missing: " + " ".join(missing))
print(":".join(dirs))
EOF
)" || die "CUDA 13 libraries not found in torch's install: $libs"
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for b in xsent xsent-cuda-tests; do
    xz -dc "$dist/$b.xz" >"$work/bin/$b" && chmod +x "$work/bin/$b" || die "cannot unpack $b"
    if ldd "$work/bin/$b" | grep -q 'not found'; then
        die "$b cannot find its libraries: $(ldd "$work/bin/$b" | grep 'not found' | tr -s ' \t' ' ')"
    fi
done
xsent="$work/bin/xsent"
fi
mkdir -p "$work/data" "$work/e5"
[ -d "$work/data/tatoeba" ] || xz -dc "$dist/data.tar.xz" | tar -C "$work/data" -xf - || die "cannot unpack the data"
[ -f "$work/e5/tokenizer.json" ] || xz -dc "$dist/e5/tokenizer.json.xz" >"$work/e5/tokenizer.json"
cp "$dist/e5/config.json" "$dist/e5/tokenizer_config.json" "$work/e5/"
gpu_name="$( [ "$rehearsal" = 1 ] && echo "rehearsal on the CPU: $(lscpu | sed -n 's/^Model name: *//p')" || nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n1)"
record gpu "$gpu_name" "" null 0
record build "$(head -n1 "$dist/BUILD")" "" null 0

# Models (both parts need them; kept when the machine is still warm).
t0=$(date +%s)
"$py" "$helper" models --out "$work/models" --e5 "$work/e5" "${small[@]}" >"$out/models.log" 2>&1 \
    && record models "$(tail -n1 "$out/models.log")" "" true $(( $(date +%s) - t0 )) \
    || { record models "failed: $(tail -n2 "$out/models.log" | tr '\n' ' ')" "" false $(( $(date +%s) - t0 )); }
M="$work/models"

# The device of a side of a comparison: cpu, or gpu (cuda; cpu in a rehearsal).
dev() { [ "$1" = cpu ] && echo cpu || echo "$gdev"; }

# run NAME LIMIT_SECONDS COMMAND...: the command under a time limit, its output in $out/NAME.log.
run() {
    local name="$1" limit="$2"; shift 2
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
}

# A recipe's config for the training checks: BODY is its sections; 20 steps, no validation
# until the end, dropout off where the recipe has one. shard_size = batch_size: the CPU cuts a
# micro-batch into shards of train.shard_size, each with its own random stream (masked tokens,
# negatives), where the GPU runs it whole with one; one shard makes the draws the same, so the
# losses compare the devices' arithmetic alone.
train_cfg() { # file body
    printf '%s\n[train]\nmax_steps = 20\nbatch_size = 16\nshard_size = 16\nlog_every = 1\neval_every = 0\ncheckpoint_every = 0\n[optim]\nlr = 1e-3\nwarmup_steps = 2\n' "$2" >"$1"
}

# ------------------------------------------------------------------------ part 1 --
if [ "$part" = 1 ] || [ "$part" = all ]; then
    t0=$(date +%s)
    if [ "$rehearsal" = 1 ]; then
        record "tests/cuda.rs" "skipped in a rehearsal" "all pass" null 0
    elif command -v cargo >/dev/null && cargo test --offline --release --features cuda --test cuda >"$out/cuda-tests.log" 2>&1; then
        record "tests/cuda.rs (cargo)" "$(grep -E '^test result' "$out/cuda-tests.log" | tail -n1)" "all pass" true $(( $(date +%s) - t0 ))
    else
        XSENT_FIXTURES="$dist/fixtures" run cuda-tests 240 "$work/bin/xsent-cuda-tests" --test-threads=1
        rc=$?
        record "tests/cuda.rs" "$(grep -E '^test result' "$out/cuda-tests.log" | tail -n1 | cut -c1-58) rc=$rc" "all pass" "$([ $rc = 0 ] && echo true || echo false)" $(( $(date +%s) - t0 ))
    fi

    # Embeddings: CPU vs GPU (xsent), GPU xsent vs torch.
    "$py" "$helper" sentences --data "$work/data" --n 2000 --out "$work/s2k.txt" >/dev/null
    for m in e5s xlmr-base; do
        t0=$(date +%s)
        ok=true
        for side in cpu gpu; do
            run "embed-$m-$side" 300 "$xsent" embed -m "$M/$m" --device "$(dev "$side")" -i "$work/s2k.txt" --format npy -o "$work/$m-$side.npy" --batch-size 64 || ok=false
        done
        if $ok; then
            c=$("$py" "$helper" cosines --a "$work/$m-cpu.npy" --b "$work/$m-gpu.npy")
            mc=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["min_cosine"])' "$c")
            record "embed $m cpu vs cuda" "$c" "min cosine >= 0.99999" "$("$py" -c "print('true' if $mc >= 0.99999 else 'false')")" $(( $(date +%s) - t0 ))
        else
            record "embed $m cpu vs cuda" "failed: $(tail -n1 "$out/embed-$m-gpu.log" "$out/embed-$m-cpu.log" | tr '\n' ' ' | cut -c1-200)" "runs" false $(( $(date +%s) - t0 ))
        fi
        t0=$(date +%s)
        if run "torch-embed-$m" 300 "$py" "$helper" torch-embed --model "$M/$m" --input "$work/s2k.txt" --out "$work/$m-torch.npy" --repeat 1 && [ -f "$work/$m-gpu.npy" ]; then
            c=$("$py" "$helper" cosines --a "$work/$m-gpu.npy" --b "$work/$m-torch.npy")
            mc=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["min_cosine"])' "$c")
            record "embed $m cuda vs torch" "$c" "min cosine >= 0.99999" "$("$py" -c "print('true' if $mc >= 0.99999 else 'false')")" $(( $(date +%s) - t0 ))
        else
            record "embed $m cuda vs torch" "failed: $(tail -n1 "$out/torch-embed-$m.log" | cut -c1-200)" "runs" false $(( $(date +%s) - t0 ))
        fi
        # Half precision on the GPU against f32 on the GPU (the real models' cost is measured on
        # the CPU with the same code path: docs/gpu.md).
        for dt in bf16 f16; do
            t0=$(date +%s)
            if run "embed-$m-$dt" 300 env "${half_env[@]}" "$xsent" embed -m "$M/$m" --device "$gdev" --dtype "$dt" -i "$work/s2k.txt" --format npy -o "$work/$m-$dt.npy" --batch-size 64 \
                && [ -f "$work/$m-gpu.npy" ]; then
                c=$("$py" "$helper" cosines --a "$work/$m-gpu.npy" --b "$work/$m-$dt.npy")
                mc=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["min_cosine"])' "$c")
                record "embed $m cuda $dt vs f32" "$c" "min cosine >= 0.99" "$("$py" -c "print('true' if $mc >= 0.99 else 'false')")" $(( $(date +%s) - t0 ))
            else
                record "embed $m cuda $dt vs f32" "failed: $(tail -n1 "$out/embed-$m-$dt.log" | cut -c1-200)" "runs" false $(( $(date +%s) - t0 ))
            fi
        done
    done

    # Evaluations, mining and plotting on the GPU, against the CPU's output.
    D="$work/data"
    for task in "tatoeba --langs deu,fra" "sts" "bucc --langs zh-en" "xsr --multi30k"; do
        name="eval-${task%% *}"
        t0=$(date +%s)
        ok=true
        for side in cpu gpu; do
            # shellcheck disable=SC2086
            run "$name-$side" 240 "$xsent" eval $task -m "$M/e5s" --data-dir "$D" --device "$(dev "$side")" --report "$work/$name-$side.json" || ok=false
        done
        if $ok; then
            cp "$work/$name-cpu.json" "$work/$name-gpu.json" "$out/"
            same=$("$py" - "$work/$name-cpu.json" "$work/$name-gpu.json" <<'EOF'
import json, sys
# The scores, not the per-item lists (BUCC's ranked candidates: one near-tie that changes
# order shifts every index after it) nor timings.
def nums(x, path=""):
    if isinstance(x, dict):
        for k, v in x.items():
            if k not in ("seconds", "elapsed_s", "created", "date", "device", "time_s", "embed_s", "wall_s", "xsent", "version", "command", "argv", "model", "report", "items"):
                yield from nums(v, f"{path}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from nums(v, f"{path}[{i}]")
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield path, float(x)
a, b = (dict(nums(json.load(open(p)))) for p in sys.argv[1:3])
common = set(a) & set(b)
# Scores are percentages or correlations (absolute 0.05); counts (BUCC's candidates) may move
# by a near-tie at the threshold (relative 1e-3).
worst = max((abs(a[k] - b[k]) if abs(a[k] - b[k]) > 1e-3 * max(abs(a[k]), 1.0) else 0.0 for k in common), default=0.0)
print(f"{len(common)} numbers, max |cpu - cuda| {worst:.3g}")
EOF
)
            worst=$(echo "$same" | sed 's/.*max |cpu - cuda| //')
            record "eval ${task%% *} cpu vs cuda" "$same" "scores equal (<= 0.05)" "$("$py" -c "print('true' if float('$worst') <= 0.05 else 'false')")" $(( $(date +%s) - t0 ))
        else
            record "eval ${task%% *} cpu vs cuda" "failed: $(tail -n1 "$out/$name-gpu.log" "$out/$name-cpu.log" | tr '\n' ' ' | cut -c1-200)" "runs" false $(( $(date +%s) - t0 ))
        fi
    done
    t0=$(date +%s)
    head -n 1000 "$D/tatoeba/tatoeba.deu-eng.deu" >"$work/mine.de"
    head -n 1000 "$D/tatoeba/tatoeba.deu-eng.eng" >"$work/mine.en"
    ok=true
    for side in cpu gpu; do
        run "mine-$side" 240 "$xsent" mine -m "$M/e5s" --device "$(dev "$side")" --src-file "$work/mine.de" --tgt-file "$work/mine.en" -o "$work/mine-$side.tsv" || ok=false
    done
    if $ok; then
        cp "$work/mine-cpu.tsv" "$work/mine-gpu.tsv" "$out/"
        # The same pairs (as a set: pairs whose scores agree to the printed digits may swap
        # places) with the same scores.
        same=$("$py" - "$work/mine-cpu.tsv" "$work/mine-gpu.tsv" <<'EOF'
import sys
a, b = ([l.rstrip("\n").split("\t") for l in open(p, encoding="utf-8")] for p in sys.argv[1:3])
sa, sb = {(x[1], x[2]): float(x[0]) for x in a}, {(x[1], x[2]): float(x[0]) for x in b}
only = len(set(sa) ^ set(sb))
worst = max((abs(sa[k] - sb[k]) for k in set(sa) & set(sb)), default=0.0)
print(f"{len(b)} pairs (cpu {len(a)}), {only} in one list only, max score diff {worst:.2g}", "true" if only == 0 and worst <= 1e-5 else "false")
EOF
)
        record "mine cpu vs cuda" "${same% *}" "same pairs, scores within 1e-5" "${same##* }" $(( $(date +%s) - t0 ))
    else
        record "mine cpu vs cuda" "failed: $(tail -n1 "$out/mine-gpu.log" | cut -c1-200)" "runs" false $(( $(date +%s) - t0 ))
    fi
    t0=$(date +%s)
    if run plot-pca 240 "$xsent" plot pca -m "$M/e5s" --device "$gdev" --data-dir "$D" --rows 100 --langs en,de,fr -o "$out/pca.png"; then
        record "plot pca cuda" "$(stat -c %s "$out/pca.png") bytes" "a PNG" true $(( $(date +%s) - t0 ))
    else
        record "plot pca cuda" "failed: $(tail -n1 "$out/plot-pca.log" | cut -c1-200)" "runs" false $(( $(date +%s) - t0 ))
    fi

    # 20 training steps, dropout off, CPU against GPU.
    tiny="$work/tiny"
    mkdir -p "$tiny"
    "$py" "$helper" words --out "$tiny/words.txt"
    for f in tiny-bert tiny-xlm-roberta; do
        "$py" "$helper" tiny-model --fixture "$dist/fixtures/$f" --words "$tiny/words.txt" --out "$tiny/$f"
    done
    "$py" "$helper" pairs --n 400 --seed 3 --out "$tiny/pairs.tsv"
    src="[[data.sources]]
kind = \"tsv\"
path = \"$tiny/pairs.tsv\"
src_lang = \"en\"
tgt_lang = \"de\"
[data]
val_size = 32"
    xnli_small="$work/data/xnli"
    dueam_val="[[dueam.val_sources]]
kind = \"aligned\"
src = \"$work/data/parallel/multi30k/val.en.gz\"
tgt = \"$work/data/parallel/multi30k/val.de.gz\"
src_lang = \"en\"
tgt_lang = \"de\""
    train_cfg "$tiny/distill.toml" "recipe = \"distill\"
seed = 7
[distill]
teacher = \"$tiny/tiny-bert\"
student = \"$tiny/tiny-xlm-roberta\"
max_length = 16
projection_fit_size = 100
dropout = 0.0
$src"
    train_cfg "$tiny/lightweight.toml" "recipe = \"lightweight\"
seed = 5
[lightweight]
vocab_size = 90
layers = 2
hidden = 32
heads = 4
ffn = 64
max_length = 16
dropout = 0.0
$src"
    train_cfg "$tiny/sp.toml" "recipe = \"sp\"
seed = 3
[sp]
units = \"word\"
dim = 16
megabatch_max = 3
anneal_rate = 2
symmetric = true
dropout = 0.0
$src"
    train_cfg "$tiny/disentangle.toml" "recipe = \"disentangle\"
seed = 3
[disentangle]
base = \"$tiny/tiny-xlm-roberta\"
max_length = 16
$src"
    train_cfg "$tiny/dueam.toml" "recipe = \"dueam\"
seed = 7
[dueam]
anchor = \"$M/e5s\"
learner = \"$M/e5s\"
max_length = 64
dropout = 0.0
pairs = \"weak\"
xnli_dir = \"$xnli_small\"
splits = [\"dev\"]
langs = [\"en\", \"de\"]
wmd_solver = \"sinkhorn\"
$dueam_val"
    train_cfg "$tiny/distill-e5s.toml" "recipe = \"distill\"
seed = 7
[distill]
teacher = \"$M/e5s-teacher\"
student = \"$M/e5s\"
max_length = 64
projection = \"none\"
dropout = 0.0
[data]
val_size = 64
[[data.sources]]
kind = \"xnli\"
dir = \"$xnli_small\"
splits = [\"dev\"]
pivot = \"en\"
langs = [\"de\"]"
    for r in distill lightweight sp disentangle dueam distill-e5s; do
        t0=$(date +%s)
        ok=true
        extra=()
        [ "$r" = lightweight ] && extra=(--set "lightweight.tokenizer=\"$tiny/run-$r-cpu/init/tokenizer.json\"")
        run "train-$r-cpu" 300 "$xsent" train --config "$tiny/$r.toml" --out "$tiny/run-$r-cpu" --set 'train.device="cpu"' || ok=false
        if $ok; then
            run "train-$r-gpu" 300 env "${gpu_env[@]}" "$xsent" train --config "$tiny/$r.toml" --out "$tiny/run-$r-gpu" --set "train.device=\"$gdev\"" "${extra[@]}" || ok=false
        fi
        if $ok; then
            cp "$tiny/run-$r-gpu/metrics.jsonl" "$out/train-$r-gpu-metrics.jsonl"
            cp "$tiny/run-$r-cpu/metrics.jsonl" "$out/train-$r-cpu-metrics.jsonl"
            c=$("$py" "$helper" losses --a "$tiny/run-$r-cpu/metrics.jsonl" --b "$tiny/run-$r-gpu/metrics.jsonl")
            worst=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["max_rel_diff"])' "$c")
            sps=$("$py" "$helper" xsent-sps --metrics "$tiny/run-$r-gpu/metrics.jsonl" --skip 5 2>/dev/null | "$py" -c 'import json,sys; print(round(json.load(sys.stdin)["sentences_per_s"]))' 2>/dev/null)
            record "train $r cpu vs cuda" "max rel loss diff $worst over 20 steps; cuda $sps sent/s" "<= 1e-4" "$("$py" -c "print('true' if $worst <= 1e-4 else 'false')")" $(( $(date +%s) - t0 ))
        else
            record "train $r cpu vs cuda" "failed: $(tail -n1 "$out/train-$r-gpu.log" "$out/train-$r-cpu.log" 2>/dev/null | tr '\n' ' ' | cut -c1-200)" "runs" false $(( $(date +%s) - t0 ))
        fi
    done

    # train.precision = "bf16" on the GPU against the f32 GPU run above (the same 20 distill steps
    # on e5s): close (bf16 keeps 8 bits of mantissa; 0.23 % at most on the tiny fixtures on the
    # CPU) but not equal (bf16 ran). In a rehearsal, the GPU's path on the CPU.
    t0=$(date +%s)
    r=distill-e5s
    sps() { "$py" "$helper" xsent-sps --metrics "$1" --skip 5 2>/dev/null | "$py" -c 'import json,sys; print(round(json.load(sys.stdin)["sentences_per_s"]))' 2>/dev/null; }
    if [ -f "$tiny/run-$r-gpu/metrics.jsonl" ] \
        && run "train-$r-gpu-bf16" 300 env "${half_env[@]}" "$xsent" train --config "$tiny/$r.toml" --out "$tiny/run-$r-gpu-bf16" \
            --set "train.device=\"$gdev\"" --set 'train.precision="bf16"'; then
        cp "$tiny/run-$r-gpu-bf16/metrics.jsonl" "$out/train-$r-gpu-bf16-metrics.jsonl"
        c=$("$py" "$helper" losses --a "$tiny/run-$r-gpu/metrics.jsonl" --b "$tiny/run-$r-gpu-bf16/metrics.jsonl")
        worst=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["max_rel_diff"])' "$c")
        record "train $r cuda bf16 vs f32" "rel loss diff $(printf '%.3g' "$worst"); sent/s bf16 $(sps "$tiny/run-$r-gpu-bf16/metrics.jsonl"), f32 $(sps "$tiny/run-$r-gpu/metrics.jsonl")" \
            "<= 1e-2, not 0" "$("$py" -c "print('true' if 0 < $worst <= 1e-2 else 'false')")" $(( $(date +%s) - t0 ))
    else
        record "train $r cuda bf16 vs f32" "failed: $(tail -n1 "$out/train-$r-gpu-bf16.log" "$out/train-$r-gpu.log" 2>/dev/null | tr '\n' ' ' | cut -c1-200)" "runs" false $(( $(date +%s) - t0 ))
    fi

    # xsent's CUDA kernels for training (LayerNorm, softmax, GELU, the linear layer, the
    # optimiser's two one-launch passes: src/gpu) and its device settings (src/device.rs)
    # against candle as it comes (XSENT_KERNELS=candle, the path before them): the same 20 e5s
    # distill steps, losses within 1e-4, and both speeds (their gain on this card).
    t0=$(date +%s)
    if [ -f "$tiny/run-$r-gpu/metrics.jsonl" ] \
        && run "train-$r-gpu-candle" 300 env XSENT_KERNELS=candle "$xsent" train --config "$tiny/$r.toml" \
            --out "$tiny/run-$r-gpu-candle" --set "train.device=\"$gdev\""; then
        cp "$tiny/run-$r-gpu-candle/metrics.jsonl" "$out/train-$r-gpu-candle-metrics.jsonl"
        c=$("$py" "$helper" losses --a "$tiny/run-$r-gpu/metrics.jsonl" --b "$tiny/run-$r-gpu-candle/metrics.jsonl")
        worst=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["max_rel_diff"])' "$c")
        record "train $r cuda kernels vs candle ops" "rel loss diff $(printf '%.3g' "$worst"); sent/s kernels $(sps "$tiny/run-$r-gpu/metrics.jsonl"), candle ops $(sps "$tiny/run-$r-gpu-candle/metrics.jsonl")" \
            "<= 1e-4" "$("$py" -c "print('true' if $worst <= 1e-4 else 'false')")" $(( $(date +%s) - t0 ))
    else
        record "train $r cuda kernels vs candle ops" "failed: $(tail -n1 "$out/train-$r-gpu-candle.log" 2>/dev/null | cut -c1-200)" "runs" false $(( $(date +%s) - t0 ))
    fi

    # Where the CPU's time goes in those GPU steps (the step waits on the host issuing candle's
    # ops): a sampling profile of the 20 e5s distill steps (XSENT_PROFILE, src/profile.rs), by
    # function, in $out/host-profile-distill-e5s.txt; the row shows the top of its self table.
    t0=$(date +%s)
    prof="$out/host-profile-distill-e5s.txt"
    if run "train-$r-gpu-profile" 300 env "${gpu_env[@]}" XSENT_PROFILE="$prof" "$xsent" train --config "$tiny/$r.toml" \
        --out "$tiny/run-$r-gpu-profile" --set "train.device=\"$gdev\"" && [ -s "$prof" ]; then
        top=$(sed -n '/^## self/,$p' "$prof" | sed -n '4,6p' | awk '{$1=$1; print}' | cut -c1-60 | paste -sd ';' -)
        record "host profile $r cuda (self)" "$top" "written" true $(( $(date +%s) - t0 ))
    elif [ "$rehearsal" = 1 ] && grep -q 'built without the profiler' "$out/train-$r-gpu-profile.log" 2>/dev/null; then
        record "host profile $r cuda" "skipped: a rehearsal binary without --features profile" "written" null $(( $(date +%s) - t0 ))
    else
        record "host profile $r cuda" "failed: $(tail -n1 "$out/train-$r-gpu-profile.log" 2>/dev/null | cut -c1-200)" "written" false $(( $(date +%s) - t0 ))
    fi
fi

# ------------------------------------------------------------------------ part 2 --
if [ "$part" = 2 ] || [ "$part" = all ]; then
    t0=$(date +%s)
    XSENT_BIN="$xsent" XSENT_PYTHON="$py" run bench-embed 300 scripts/bench-embed-gpu.sh --models "$M/e5s,$M/xlmr-base" --data "$work/data" --sentences "$([ "$rehearsal" = 1 ] && echo 1000 || echo 20000)"
    rc=$?
    cp "$out/bench-embed.log" "$out/bench-embed.txt" 2>/dev/null
    while IFS= read -r line; do
        record "$(echo "$line" | cut -d'|' -f1 | xargs)" "$(echo "$line" | cut -d'|' -f2 | xargs)" ">= 1.0x torch" "$(echo "$line" | cut -d'|' -f3 | xargs)" $(( $(date +%s) - t0 ))
    done < <(grep '^RESULT' "$out/bench-embed.log" | sed 's/^RESULT //')
    [ $rc = 0 ] || record "bench-embed-gpu" "exit $rc: $(tail -n1 "$out/bench-embed.log" | cut -c1-200)" "runs" false $(( $(date +%s) - t0 ))
    t0=$(date +%s)
    XSENT_BIN="$xsent" XSENT_PYTHON="$py" XSENT_BENCH_KEEP="$out" run bench-train 360 scripts/bench-train-gpu.sh --student "$M/e5s" --teacher "$M/e5s-teacher" --data "$work/data" --steps "$([ "$rehearsal" = 1 ] && echo 6 || echo 14)"
    rc=$?
    while IFS= read -r line; do
        record "$(echo "$line" | cut -d'|' -f1 | xargs)" "$(echo "$line" | cut -d'|' -f2 | xargs)" ">= 0.8x torch" "$(echo "$line" | cut -d'|' -f3 | xargs)" $(( $(date +%s) - t0 ))
    done < <(grep '^RESULT' "$out/bench-train.log" | sed 's/^RESULT //')
    [ $rc = 0 ] || record "bench-train-gpu" "exit $rc: $(tail -n1 "$out/bench-train.log" | cut -c1-200)" "runs" false $(( $(date +%s) - t0 ))

    # 50 steps of each paper config: step time and peak GPU memory.
    for p in configs/*-paper.toml; do
        n=$(basename "$p" .toml)
        t0=$(date +%s)
        "$py" "$helper" paper-config --paper "$p" --model "$M/xlmr-base" --data "$work/data" --device "$gdev" --out "$work/$n.toml" 2>"$out/$n-config.log" \
            || { record "$n 50 steps" "no config: $(tail -n1 "$out/$n-config.log")" "runs" false 0; continue; }
        : >"$work/$n-mem.txt"
        [ "$rehearsal" = 1 ] || nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$work/$n-mem.txt" 2>/dev/null &
        smi=$!
        run "$n" 150 "$xsent" train --config "$work/$n.toml" --out "$work/run-$n"
        rc=$?
        kill "$smi" 2>/dev/null
        peak=$(sort -n "$work/$n-mem.txt" | tail -n1)
        cp "$work/run-$n/metrics.jsonl" "$out/$n-metrics.jsonl" 2>/dev/null
        if [ $rc = 0 ]; then
            s=$("$py" "$helper" xsent-sps --metrics "$work/run-$n/metrics.jsonl" --skip 5)
            record "$n 50 steps" "$(echo "$s" | "$py" -c 'import json,sys; r=json.load(sys.stdin); print("%.3f s/step, %.0f sent/s" % (r["step_s"], r["sentences_per_s"]))'), peak ${peak:-?} MiB" "runs" true $(( $(date +%s) - t0 ))
        else
            record "$n 50 steps" "exit $rc: $(tail -n1 "$out/$n.log" | cut -c1-150); peak ${peak:-?} MiB" "runs" false $(( $(date +%s) - t0 ))
        fi
    done
fi

# ------------------------------------------------------------------------ part 3 --
if [ "$part" = 3 ]; then
    t0=$(date +%s)
    XSENT_BIN="$xsent" XSENT_PYTHON="$py" XSENT_BENCH_KEEP="$out" run profile 480 scripts/bench-train-gpu.sh --ncu --ncu-steps 2 --steps 8 \
        --student "$M/e5s" --teacher "$M/e5s-teacher" --data "$work/data"
    rc=$?
    while IFS= read -r line; do
        record "$(echo "$line" | cut -d'|' -f1 | xargs)" "$(echo "$line" | cut -d'|' -f2 | xargs)" "" null $(( $(date +%s) - t0 ))
    done < <(grep '^PROFILE' "$out/profile.log" | sed 's/^PROFILE //')
    grep '^PROFILE' "$out/profile.log" # in full (the table cuts results at 58 characters)
    [ $rc = 0 ] || record "profile" "exit $rc: $(tail -n1 "$out/profile.log" | cut -c1-200)" "runs" false $(( $(date +%s) - t0 ))
fi

record total "$(( $(date +%s) - started )) s" "<= 480 s per part" null $(( $(date +%s) - started ))
"$py" "$helper" table --results "$results" | tee "$out/table.txt"
# The device tool brings back only the first few files of $OUT (by name): everything in one
# archive that sorts first.
tar -czf "$work/0-everything.tgz" -C "$out" . 2>/dev/null && mv "$work/0-everything.tgz" "$out/"

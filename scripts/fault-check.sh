#!/usr/bin/env bash
# Fault probes of xsent as an operator meets them (issue 43): closed output streams,
# pathological input, concurrent runs, damaged checkpoints, signals, kill -9, a full disk,
# truncated gzip, non-UTF-8 paths. Each probe runs the release binary and checks two things:
#   handled       the command did what it should (finished, or stopped with a clear error;
#                 no panic, no exit 101, memory within the documented bound)
#   lost nothing  no output or run was destroyed: earlier files intact, rows before an error
#                 kept, a resumed run ends with the weights of an uninterrupted one (cmp)
# and a table is printed, with a total line. Exit status: 0 when every probe passes both.
#
# usage: scripts/fault-check.sh [--only PATTERN] [--skip PATTERN] [--keep]
#   --only PATTERN   run the probes whose name matches the grep pattern
#   --skip PATTERN   leave out the probes whose name matches it
#   --keep           keep the work folder (its path is printed)
#
# Needs: the release binary (built if missing), models/all-MiniLM-L6-v2 and
# models/multilingual-e5-small (scripts/setup.sh), the tiny fixtures (XSENT_FIXTURES, default
# ../shared/fixtures) for the training probes, XSENT_DATA (default ../shared/data) for
# decontamination, GNU time, python3. The full-disk probes mount a small tmpfs when run as
# root (else they use `ulimit -f`). On 2 busy cores: 2.5 minutes without the memory probes
# (--skip '10M_lines\|100MB\|2048_long'), about 20 with them (the 10M lines 15 of those).
set -uo pipefail
export LC_ALL=C

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
only=""
skip=""
keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        --only) only="${2:-}"; shift 2 ;;
        --skip) skip="${2:-}"; shift 2 ;;
        --keep) keep=1; shift ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "fault-check: unknown argument: $1 (try --help)" >&2; exit 64 ;;
    esac
done
say() { printf 'fault-check: %s\n' "$*" >&2; }
die() { printf 'fault-check: error: %s\n' "$*" >&2; exit 1; }

# shellcheck source=lib/xsent-bin.sh
. "$root/scripts/lib/xsent-bin.sh" || die "cannot read $root/scripts/lib/xsent-bin.sh"
find_xsent "$root"
models="${XSENT_MODELS:-$root/models}"
fixtures="${XSENT_FIXTURES:-$root/../shared/fixtures}"
export XSENT_DATA="${XSENT_DATA:-$root/../shared/data}"
export XSENT_THREADS="${XSENT_THREADS:-2}"
minilm="$models/all-MiniLM-L6-v2"
e5="$models/multilingual-e5-small"
for d in "$minilm" "$e5"; do [ -f "$d/model.safetensors" ] || die "$d is missing: run scripts/setup.sh first"; done
[ -f "$fixtures/tiny-bert/model.safetensors" ] || die "tiny fixtures not found at $fixtures (set XSENT_FIXTURES)"
[ -x /usr/bin/time ] || die "GNU time (/usr/bin/time) is needed"
command -v python3 > /dev/null || die "python3 is needed"

work="$(mktemp -d "${TMPDIR:-/tmp}/fault-check.XXXXXX")"
mounts=()
cleanup() {
    for m in "${mounts[@]}"; do umount "$m" 2> /dev/null; done
    if [ "$keep" = 1 ]; then say "work folder kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
export XSENT_CACHE="$work/cache"
cd "$work" || die "cannot enter $work"

# ---- the table -------------------------------------------------------------------------
rows=()
total=0 n_handled=0 n_lost=0
H=no L=no N=""
probe() {
    local name="$1"
    if [ -n "$only" ] && ! grep -q -- "$only" <<<"$name"; then return; fi
    if [ -n "$skip" ] && grep -q -- "$skip" <<<"$name"; then return; fi
    H=no L=no N=""
    local t0=$EPOCHREALTIME
    say "probe $name"
    "probe_$name" > "$work/$name.log" 2>&1
    local dt
    dt="$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')"
    N=${N//|/\\|}
    rows+=("| $name | $H | $L | $dt | $N |")
    say "  handled $H, lost nothing $L, $dt s: $N"
    total=$((total + 1))
    [ "$H" = yes ] && n_handled=$((n_handled + 1))
    [ "$L" = yes ] && n_lost=$((n_lost + 1))
}
# yes when the shell condition $1 (evaluated here, with the caller's variables) holds.
yn() { if eval "$1"; then echo yes; else echo no; fi; }
# Peak RSS (MB) of the last `peak` run, and its exit status.
peak() { /usr/bin/time -f '%M' -o "$work/peak.txt" "$@"; local rc=$?; PEAK_MB=$(($(tail -n 1 "$work/peak.txt" | tr -dc 0-9) / 1024)); return $rc; }
rows_f32() { echo $(($(stat -c %s "$1") / (4 * $2))); }
no_temp() { ! ls -A "$1" | grep -q '^\.xsent-out-'; }

# ---- a tiny training setup (the fixtures, a word-level tokenizer, synthetic pairs) --------
python3 - "$fixtures" <<'EOF' || die "cannot set up the tiny models"
import json, os, random, shutil, sys
fx = sys.argv[1]
words = [f"house{i}" for i in range(40)] + [f"haus{i}" for i in range(40)]
for m in ["tiny-bert", "tiny-xlm-roberta"]:
    os.makedirs(f"models/{m}", exist_ok=True)
    for f in ["config.json", "model.safetensors"]:
        shutil.copy(f"{fx}/{m}/{f}", f"models/{m}/{f}")
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]"])}
    for w in words:
        vocab[w] = len(vocab)
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "Whitespace"},
           "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
           "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}}
    json.dump(tok, open(f"models/{m}/tokenizer.json", "w"))
r = random.Random(5)
with open("pairs.tsv", "w") as f:
    for _ in range(400):
        idx = [r.randrange(40) for _ in range(r.randrange(3, 8))]
        f.write(" ".join(f"house{i}" for i in idx) + "\t" + " ".join(f"haus{i}" for i in idx) + "\n")
cwd = os.getcwd()
open("tiny.toml", "w").write(f'''recipe = "distill"
seed = 3
[distill]
teacher = "{cwd}/models/tiny-bert"
student = "{cwd}/models/tiny-xlm-roberta"
max_length = 16
projection_fit_size = 60
[train]
max_steps = 400
batch_size = 8
log_every = 1
eval_every = 0
checkpoint_every = 5
keep_last = 2
[optim]
lr = 1e-3
[data]
val_size = 8
[[data.sources]]
kind = "tsv"
path = "{cwd}/pairs.tsv"
src_lang = "en"
tgt_lang = "de"
''')
EOF
tiny="$work/models/tiny-bert"
# In a subshell (`train X &`, a pipeline) xsent replaces it, so that $! is xsent's own pid (the
# one the lock names, and the one a signal must reach).
xsent_here() { if [ "$BASHPID" != "$$" ]; then exec "$xsent" "$@"; else "$xsent" "$@"; fi; }
train() { local out="$1"; shift; xsent_here train --config "$work/tiny.toml" --out "$out" "$@"; }
resume() { local out="$1"; shift; xsent_here train --resume --out "$out" "$@"; }
# The uninterrupted run every resumed one is compared with.
train ref > ref.log 2>&1 || { cat ref.log >&2; die "the reference training run failed"; }
same_as_ref() { cmp -s ref/final/model.safetensors "$1/final/model.safetensors"; }
# Wait until run $1 (process $2) has written a checkpoint (so that it can be resumed), at most
# 60 s; false when the process ended first.
wait_training() {
    local i
    for ((i = 0; i < 3000; i++)); do
        compgen -G "$1/checkpoints/step-*" > /dev/null && return 0
        kill -0 "$2" 2> /dev/null || return 1
        sleep 0.02
    done
    return 1
}
# A one-line run of each model: R0 of the memory formula.
printf 'one short line\n' > one.txt
peak "$xsent" embed -m "$minilm" -i one.txt > /dev/null; R0_minilm=$PEAK_MB
peak "$xsent" embed -m "$e5" -i one.txt > /dev/null; R0_e5=$PEAK_MB

# ---- 1. closed output streams ------------------------------------------------------------
probe_train_log_reader_gone() {
    rm -rf a; train a 2>&1 | head -n 2; local rc=${PIPESTATUS[0]}
    H=$(yn '[ "$rc" = 0 ]'); L=$(yn 'same_as_ref a'); N="\`train 2>&1 | head -2\`: exit $rc"
}
probe_train_stderr_closed() {
    rm -rf a; train a 2>&-; local rc=$?
    H=$(yn '[ "$rc" = 0 ]'); L=$(yn 'same_as_ref a'); N="\`train 2>&-\`: exit $rc"
}
probe_embed_stderr_closed() {
    { echo short; printf 'word %.0s' {1..400}; echo; } > in.txt
    "$xsent" embed -m "$minilm" -i in.txt > out.jsonl 2>&-; local rc=$?
    H=$(yn '[ "$rc" = 0 ]'); L=$(yn '[ "$(wc -l < out.jsonl)" = 2 ]'); N="exit $rc, $(wc -l < out.jsonl) of 2 rows"
}
probe_embed_stdout_closed() {
    echo hello > in.txt
    "$xsent" embed -m "$minilm" -i in.txt >&- 2> err.txt; local rc=$?
    H=$(yn '[ "$rc" != 101 ] && ! grep -q panicked err.txt'); L=yes; N="exit $rc (Rust's runtime opened /dev/null as stdout) $(head -c 90 err.txt | tr '\n' ' ')"
}
probe_embed_reader_stops() {
    yes "a line" | head -n 5000 > in.txt
    "$xsent" embed -m "$minilm" -i in.txt 2> err.txt | head -n 1 > /dev/null; local rc=${PIPESTATUS[0]}
    H=$(yn '[ "$rc" = 0 ] && [ ! -s err.txt ]'); L=yes; N="\`embed | head -1\`: exit $rc, quiet"
}
probe_eval_stdout_closed() {
    printf 'a cat sits\ta cat is sitting\t4.5\na dog runs\tstocks fell\t0.2\nit rains\tit is raining\t5\n' > sts.tsv
    "$xsent" eval sts -m "$minilm" --pairs sts.tsv --report rep.json >&-; local rc=$?
    H=$(yn '[ "$rc" = 0 ]'); L=$(yn '[ -s rep.json ]'); N="exit $rc; report written"
}

# ---- 2. memory bounded by settings -------------------------------------------------------
# Bound (MB) of docs/reliability.md: 1.1 x (R0 + 300 M + 3 W + P x 4 T (2 heads L + 12 H + 2 I)).
bound_mb() { awk -v r0="$1" -v m="$2" -v w="$3" -v p="$4" -v t="$5" -v l="$6" \
    'BEGIN { printf "%d", 1.1 * (r0 + (300 * m + 3 * w + p * 4 * t * (2 * 12 * l + 12 * 384 + 2 * 1536)) / 1048576) }'; }
line_probe() { # model R0 maxlen python-expression
    python3 -c "import sys; sys.stdout.buffer.write($4 + b'\n')" > big.txt
    peak "$xsent" embed -m "$1" -i big.txt --format f32 > big.f32; local rc=$?
    local b; b=$(bound_mb "$2" 1048576 1048576 1 "$3" "$3")
    H=$(yn '[ "$rc" = 0 ] && [ "$PEAK_MB" -le "$b" ]'); L=$(yn '[ "$(rows_f32 big.f32 384)" = 1 ]')
    N="exit $rc, peak $PEAK_MB MB (bound $b, R0 $2)"
}
probe_line_100MB_letters_minilm() { line_probe "$minilm" "$R0_minilm" 256 "b'a' * 100_000_000"; }
probe_line_100MB_nuls_minilm() { line_probe "$minilm" "$R0_minilm" 256 "b'\\0' * 100_000_000"; }
probe_line_100MB_punctuation_minilm() { line_probe "$minilm" "$R0_minilm" 256 "b'!' * 100_000_000"; }
probe_line_100MB_cjk_e5() { line_probe "$e5" "$R0_e5" 512 "('字' * 33_333_333).encode()"; }
probe_2048_long_lines_batch_2048() {
    python3 -c "
import itertools
w = open('$XSENT_DATA/tatoeba/tatoeba.deu-eng.eng').read().split()
it = itertools.cycle(w)
print('\n'.join(' '.join(next(it) for _ in range(240)) for _ in range(2048)))" > long.txt
    peak "$xsent" embed -m "$minilm" -i long.txt --batch-size 2048 --max-length 64 --format f32 > long.f32; local rc=$?
    local b; b=$(bound_mb "$R0_minilm" "$(head -n 1 long.txt | wc -c)" "$(stat -c %s long.txt)" "$XSENT_THREADS" 8192 64)
    H=$(yn '[ "$rc" = 0 ] && [ "$PEAK_MB" -le "$b" ]'); L=$(yn '[ "$(rows_f32 long.f32 384)" = 2048 ]')
    N="exit $rc, peak $PEAK_MB MB (bound $b; max-length 64)"
}
probe_10M_lines_streamed() {
    yes "house1 house2 house3" | head -n 100000 > small.txt
    peak "$xsent" embed -m "$tiny" -i small.txt --format f32 > /dev/null; local small=$PEAK_MB
    yes "house1 house2 house3" | head -n 10000000 | peak "$xsent" embed -m "$tiny" --format f32 | wc -c > bytes.txt; local rc=${PIPESTATUS[2]}
    H=$(yn '[ "$rc" = 0 ] && [ "$PEAK_MB" -le $((small * 11 / 10 + 16)) ]'); L=$(yn '[ "$(cat bytes.txt)" = $((10000000 * 32 * 4)) ]')
    N="exit $rc, peak $PEAK_MB MB for 10M lines, $small MB for 100k"
}

# ---- 3. no silent wrong results ----------------------------------------------------------
probe_two_fresh_runs_one_out() {
    rm -rf c; train c > c1.log 2>&1 & local a=$!
    wait_training c $a; train c > c2.log 2>&1; local rc=$?
    wait $a; local rca=$?
    H=$(yn '[ "$rc" = 1 ] && grep -q "in use by another xsent train (pid $a" c2.log && [ "$rca" = 0 ]'); L=$(yn 'same_as_ref c')
    N="second: exit $rc, $(grep -o 'in use by another xsent train (pid [0-9]*' c2.log | head -1)"
}
probe_resume_while_running() {
    rm -rf c; train c > c1.log 2>&1 & local a=$!
    wait_training c $a; resume c > c2.log 2>&1; local rc=$?
    wait $a
    H=$(yn '[ "$rc" = 1 ] && grep -q "pid $a" c2.log'); L=$(yn 'same_as_ref c'); N="--resume refused while pid $a trains"
}
probe_lock_of_killed_run_taken_over() {
    rm -rf k; train k > k1.log 2>&1 & local a=$!
    wait_training k $a; kill -9 $a; wait $a 2> /dev/null
    resume k > k2.log 2>&1; local rc=$?
    H=$(yn '[ "$rc" = 0 ] && grep -q "taking over the lock" k2.log'); L=$(yn 'same_as_ref k'); N="kill -9, then --resume: exit $rc"
}
probe_config_fewer_layers_than_weights() {
    rm -rf m2; cp -r "$tiny" m2; sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 1/' m2/config.json
    echo house1 > in.txt
    "$xsent" embed -m m2 -i in.txt > /dev/null 2> err.txt; local rc=$?
    "$xsent" embed -m m2 -i in.txt --layers 1 > /dev/null 2>&1; local rc2=$?
    H=$(yn '[ "$rc" = 1 ] && grep -q "encoder.layer.1" err.txt && [ "$rc2" = 0 ]'); L=yes; N="refused naming encoder.layer.1.*; --layers 1 runs"
}
probe_bit_flip_in_checkpoint() {
    rm -rf f; train f --stop-after 20 > /dev/null 2>&1
    python3 -c "
p = 'f/checkpoints/step-20/params.safetensors'; b = bytearray(open(p, 'rb').read()); b[-100] ^= 0x10; open(p, 'wb').write(b)"
    resume f > f.log 2>&1; local rc=$?
    H=$(yn '[ "$rc" = 0 ] && grep -q "step-20 is damaged" f.log'); L=$(yn 'same_as_ref f && [ -d f/checkpoints/damaged-step-20 ]')
    N="fell back to step-15; final weights = uninterrupted run's"
}
probe_every_checkpoint_damaged() {
    rm -rf g; train g --stop-after 20 > /dev/null 2>&1
    for s in g/checkpoints/step-*; do echo '{}' > "$s/state.json"; done
    local before; before=$(ls g/checkpoints)
    resume g > g.log 2>&1; local rc=$?
    H=$(yn '[ "$rc" = 1 ] && grep -q "no checkpoint in" g.log'); L=$(yn '[ "$(ls g/checkpoints)" = "$before" ]'); N="clear error, nothing moved"
}

# ---- 4. signals, kills, leftovers ----------------------------------------------------------
signal_train() { # SIG
    rm -rf s; train s > s1.log 2>&1 & local a=$!
    wait_training s $a; kill -"$1" $a; wait $a; local rc=$?
    resume s > s2.log 2>&1; local rc2=$?
    H=$(yn '[ "$rc" = 130 ] && [ "$rc2" = 0 ]'); L=$(yn 'same_as_ref s'); N="SIG$1: exit $rc, checkpoint; --resume: exit $rc2"
}
probe_sigint_train() { signal_train INT; }
probe_sigterm_train() { signal_train TERM; }
probe_sighup_train() { signal_train HUP; }
probe_kill9_train_random_steps() {
    rm -rf r; local i steps=""
    for i in 1 2 3; do
        if [ -d r ]; then resume r > r$i.log 2>&1 & else train r > r$i.log 2>&1 & fi
        local a=$!
        wait_training r $a
        sleep "$(awk -v s=$RANDOM 'BEGIN { printf "%.2f", 0.2 + (s % 100) / 100 }')"
        kill -9 $a 2> /dev/null; wait $a 2> /dev/null
        steps="$steps $(ls r/checkpoints 2> /dev/null | sed -n 's/^step-//p' | sort -n | tail -1)"
    done
    resume r > r4.log 2>&1; local rc=$?
    H=$(yn '[ "$rc" = 0 ]'); L=$(yn 'same_as_ref r'); N="killed at checkpoints$steps, resumed: identical weights"
}
probe_stale_step_tmp_removed() {
    rm -rf t; train t --stop-after 10 > /dev/null 2>&1
    mkdir -p t/checkpoints/.step-12.tmp && echo half > t/checkpoints/.step-12.tmp/params.safetensors
    resume t > t.log 2>&1; local rc=$?
    H=$(yn '[ "$rc" = 0 ] && [ ! -e t/checkpoints/.step-12.tmp ] && grep -q "cut short" t.log'); L=$(yn 'same_as_ref t'); N="removed with a message"
}
probe_warmup_past_max_steps() {
    rm -rf w; train w --set train.max_steps=5 --set optim.warmup_steps=50 > w.log 2>&1; local rc=$?
    H=$(yn '[ "$rc" = 0 ] && grep -q "warmup_steps = 50 is more than" w.log'); L=yes; N="warned"
}
probe_resume_without_checkpoint() {
    rm -rf e; mkdir e
    resume e > e.log 2>&1; local rc=$?
    H=$(yn '[ "$rc" = 1 ] && ! grep -q panicked e.log'); L=$(yn '[ -z "$(ls -A e)" ]'); N="$(head -c 80 e.log | tr '\n' ' ')"
}
big_input() { yes "a sentence to embed, again and again" | head -n 20000 > big_in.txt; }
probe_sigterm_embed_to_file() {
    big_input; rm -rf o; mkdir o; echo earlier > o/v.jsonl
    "$xsent" embed -m "$minilm" -i big_in.txt -o o/v.jsonl 2> /dev/null & local a=$!
    sleep 2; kill -TERM $a; wait $a; local rc=$?
    H=$(yn '[ "$rc" = 130 ] && no_temp o'); L=$(yn '[ "$(cat o/v.jsonl)" = earlier ]'); N="exit $rc, no .xsent-out-* left, earlier file intact"
}
probe_kill9_embed_to_file() {
    big_input; rm -rf o; mkdir o; echo earlier > o/v.jsonl
    "$xsent" embed -m "$minilm" -i big_in.txt -o o/v.jsonl 2> /dev/null & local a=$!
    sleep 2; kill -9 $a; wait $a 2> /dev/null
    local left; left=$(ls -A o | grep -c '^\.xsent-out-')
    echo one > one_in.txt; "$xsent" embed -m "$minilm" -i one_in.txt -o o/v.jsonl 2> k.log; local rc=$?
    H=$(yn '[ "$rc" = 0 ] && no_temp o && grep -q "which is gone" k.log'); L=yes
    N="$left temporary file left by kill -9, removed by the next run"
}
probe_earlier_partial_kept() {
    rm -rf p; mkdir p
    printf 'one\ntwo\n\xff\n' | "$xsent" embed -m "$minilm" -o p/v.jsonl 2> /dev/null
    local first; first=$(md5sum < p/v.jsonl.partial)
    printf 'three\n\xff\n' | "$xsent" embed -m "$minilm" -o p/v.jsonl 2> p.log; local rc=$?
    H=$(yn '[ "$rc" = 1 ] && grep -q "v.jsonl.partial.1" p.log'); L=$(yn '[ "$(md5sum < p/v.jsonl.partial)" = "$first" ] && [ -s p/v.jsonl.partial.1 ]')
    N="second failure's rows in FILE.partial.1"
}
probe_read_only_output() {
    rm -f ro.jsonl; echo mine > ro.jsonl; chmod a-w ro.jsonl
    echo hi | "$xsent" embed -m "$minilm" -o ro.jsonl 2> ro.log; local rc=$?
    local kept; kept=$(cat ro.jsonl)
    echo hi | "$xsent" embed -m "$minilm" -o ro.jsonl --force 2> /dev/null; local rc2=$?
    H=$(yn '[ "$rc" = 1 ] && grep -q read-only ro.log && [ "$rc2" = 0 ]'); L=$(yn '[ "$kept" = mine ]'); N="refused; --force replaces"
}
probe_f32_pipe_interrupted() {
    yes "sentence number of many" | head -n 6000 > six.txt
    python3 - "$xsent" "$minilm" <<'EOF' > f32.txt
import os, signal, subprocess, sys, time
p = subprocess.Popen([sys.argv[1], "embed", "-m", sys.argv[2], "-i", "six.txt", "--format", "f32"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
got = p.stdout.read(4096)
time.sleep(0.3)
p.send_signal(signal.SIGINT)
got += p.stdout.read()
print(p.wait(), len(got), len(got) % 1536)
EOF
    local rc n cut; read -r rc n cut < f32.txt
    H=$(yn '[ "$rc" = 130 ]'); L=$(yn '[ "$cut" = 0 ]'); N="SIGINT with the pipe full: $n bytes, $cut past the last whole row"
}
probe_invalid_utf8_line() {
    rm -rf u; mkdir u
    printf 'one\ntwo\nbad \xff\nfour\n' | "$xsent" embed -m "$minilm" -o u/v.jsonl 2> u.log; local rc=$?
    H=$(yn '[ "$rc" = 1 ] && grep -q "line 3 is not valid UTF-8" u.log'); L=$(yn '[ "$(wc -l < u/v.jsonl.partial)" = 2 ]'); N="error names line 3; 2 rows kept"
}
probe_truncated_gzip() {
    yes "a line of text" | head -n 50000 | gzip > full.gz
    head -c $(($(stat -c %s full.gz) / 2)) full.gz > cut.txt.gz
    rm -rf z; mkdir z
    "$xsent" embed -m "$tiny" -i cut.txt.gz -o z/v.f32 --format f32 2> z.log; local rc=$?
    local n; n=$(rows_f32 z/v.f32.partial 32 2> /dev/null || echo 0)
    H=$(yn '[ "$rc" = 1 ] && grep -q "cut.txt.gz" z.log && ! grep -q panicked z.log'); L=$(yn '[ "$n" -gt 0 ]')
    N="exit $rc; $n rows before the cut kept: $(grep -o 'line [0-9]* [a-z ]*' z.log | head -1)"
}
probe_non_utf8_paths() {
    local d=$'dir\xff' f=$'in\xfe.txt' o=$'out\xfd.jsonl'
    rm -rf "$d"; mkdir "$d"; printf 'house1\nhouse2\n' > "$d/$f"
    "$xsent" embed -m "$tiny" -i "$d/$f" -o "$d/$o" 2> /dev/null; local rc=$?
    train $'run\xff' --set train.max_steps=10 > /dev/null 2>&1; local rc2=$?
    H=$(yn '[ "$rc" = 0 ] && [ "$rc2" = 0 ]'); local run=$'run\xff'; L=$(yn '[ "$(wc -l < "$d/$o")" = 2 ] && [ -f "$run/final/model.safetensors" ]')
    N="embed -i/-o and train --out with non-UTF-8 names"
}
# A full disk: a 2 MB tmpfs when root may mount one, else a 1 MB file size limit.
small_disk() {
    rm -rf "$1"; mkdir -p "$1"
    # Sets HOW (not echoed: the mount must be recorded in this shell, for the clean-up).
    if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size="$2" tmpfs "$1" 2> /dev/null; then mounts+=("$work/$1"); HOW=tmpfs; else HOW=ulimit; fi
}
probe_disk_full_embed() {
    small_disk full1 2m; local how=$HOW
    echo earlier > full1/v.jsonl
    big_input
    if [ "$how" = tmpfs ]; then "$xsent" embed -m "$minilm" -i big_in.txt -o full1/v.jsonl 2> d.log; else (ulimit -f 1024; "$xsent" embed -m "$minilm" -i big_in.txt -o full1/v.jsonl 2> d.log); fi
    local rc=$?
    H=$(yn '[ "$rc" = 1 ] && ! grep -q panicked d.log && no_temp full1'); L=$(yn '[ "$(cat full1/v.jsonl)" = earlier ]')
    N="$how: exit $rc, $(grep -o 'No space left on device\|File too large' d.log | head -1)"
}
probe_disk_full_train_then_resume() {
    small_disk full2 1500k; local how=$HOW
    if [ "$how" = tmpfs ]; then train full2/run > t1.log 2>&1; else (ulimit -f 600; train full2/run > t1.log 2>&1); fi
    local rc=$?
    # Space again: the run moves to a roomy disk and resumes.
    rm -rf moved; cp -r full2/run moved
    resume moved > t2.log 2>&1; local rc2=$?
    H=$(yn '[ "$rc" != 0 ] && [ "$rc" != 101 ] && [ "$rc2" = 0 ]'); L=$(yn 'same_as_ref moved')
    N="$how: exit $rc ($(grep -o 'No space left on device\|File too large' t1.log | head -1)), resumed elsewhere"
}
probe_npy_to_a_pipe() {
    echo hi | "$xsent" embed -m "$minilm" --format npy -o /dev/stdout 2> n.log | cat > /dev/null; local rc=${PIPESTATUS[1]}
    H=$(yn '[ "$rc" = 1 ] && grep -q "npy" n.log'); L=yes; N="clear error"
}
probe_empty_input() {
    : > empty.txt
    "$xsent" embed -m "$minilm" -i empty.txt > e.jsonl 2> /dev/null; local rc=$?
    H=$(yn '[ "$rc" = 0 ]'); L=$(yn '[ ! -s e.jsonl ]'); N="no rows, exit $rc"
}

for p in train_log_reader_gone train_stderr_closed embed_stderr_closed embed_stdout_closed embed_reader_stops eval_stdout_closed \
    line_100MB_letters_minilm line_100MB_nuls_minilm line_100MB_punctuation_minilm line_100MB_cjk_e5 2048_long_lines_batch_2048 10M_lines_streamed \
    two_fresh_runs_one_out resume_while_running lock_of_killed_run_taken_over config_fewer_layers_than_weights \
    bit_flip_in_checkpoint every_checkpoint_damaged \
    sigint_train sigterm_train sighup_train kill9_train_random_steps stale_step_tmp_removed warmup_past_max_steps \
    resume_without_checkpoint sigterm_embed_to_file kill9_embed_to_file earlier_partial_kept read_only_output \
    f32_pipe_interrupted invalid_utf8_line truncated_gzip non_utf8_paths disk_full_embed disk_full_train_then_resume \
    npy_to_a_pipe empty_input; do
    probe "$p"
done

echo "## xsent fault probes"
echo
echo "$("$xsent" --version), $(lscpu | sed -n 's/^Model name: *//p'), $XSENT_THREADS threads; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| probe | handled | lost nothing | seconds | what happened |"
echo "|---|---|---|---:|---|"
printf '%s\n' "${rows[@]}"
echo "| **total: $total probes** | **$n_handled** | **$n_lost** | | |"
[ "$n_handled" = "$total" ] && [ "$n_lost" = "$total" ]

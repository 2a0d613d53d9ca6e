# The CPU torch + sentence-transformers venv of the benchmarks (sourced by
# scripts/bench-embed.sh and scripts/bench-train.sh; not run on its own).
#
#   ensure_torch_venv VENV TORCH_VERSION ST_VERSION
#
# Makes VENV (normally $XSENT_CACHE/bench-venv) a venv in which torch ==
# TORCH_VERSION (CPU) and sentence-transformers == ST_VERSION import, unless
# VENV/.bench-ready already marks it so; then it only checks that they import.
# The caller defines say MESSAGE and die MESSAGE (die exits).
#
# PyPI's only linux x86_64 torch wheel is the CUDA build, which pulls several
# GB of nvidia-* wheels. So pip resolves torch + sentence-transformers (+ numpy)
# into VENV/resolve.json, every resolved package except nvidia-*/cuda-*/triton
# is installed with --no-deps, and `bench_embed_torch.py make-cuda-stubs`
# builds small stand-ins for the CUDA libraries (functions that all answer "no
# device"). torch then runs on its normal CPU kernels (MKL/oneDNN, same code as
# the CPU-only build).
#
# An existing venv is kept and the pins are installed over it (bench-mine.sh's
# numpy + faiss-cpu live in the same venv). VENV.lock is held with flock while
# the venv is checked or built, so two benchmarks never build it at once.

_torch_venv_stubs="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/bench_embed_torch.py"

ensure_torch_venv() {
    local venv="$1" torch_version="$2" st_version="$3"
    local py="$venv/bin/python" lock="$venv.lock" torch_dir msg
    local -a pins
    command -v flock >/dev/null || die "flock (util-linux) is needed to lock $lock"
    mkdir -p "$(dirname "$venv")" || die "cannot create $(dirname "$venv")"
    exec 9>"$lock" || die "cannot open $lock"
    flock 9 || die "cannot lock $lock"
    if [ ! -f "$venv/.bench-ready" ]; then
        command -v python3 >/dev/null || die "python3 is needed for the torch side"
        command -v gcc >/dev/null || die "gcc is needed to build the CUDA stand-in libraries"
        [ -f "$_torch_venv_stubs" ] || die "$_torch_venv_stubs not found (it builds the venv's CUDA stand-in libraries)"
        say "installing torch $torch_version (CPU) and sentence-transformers $st_version into $venv"
        [ -x "$py" ] || python3 -m venv "$venv" || die "python3 -m venv $venv failed"
        "$py" -m pip install --quiet --disable-pip-version-check --dry-run --ignore-installed \
            --report "$venv/resolve.json" "torch==$torch_version" "sentence-transformers==$st_version" numpy \
            || die "pip could not resolve torch==$torch_version sentence-transformers==$st_version"
        mapfile -t pins < <("$py" - "$venv/resolve.json" <<'EOF'
import json, re, sys
for item in json.load(open(sys.argv[1]))["install"]:
    name, ver = item["metadata"]["name"], item["metadata"]["version"]
    if re.match(r"(nvidia|cuda)[-_]", name, re.I) or name.lower() == "triton":
        continue  # GPU-only: multi-GB and never used on CPU
    print(f"{name}=={ver}")
EOF
        )
        [ "${#pins[@]}" -gt 0 ] || die "pip resolved no packages (see $venv/resolve.json)"
        say "pip install --no-deps ${pins[*]}"
        "$py" -m pip install --quiet --disable-pip-version-check --no-deps "${pins[@]}" \
            || die "pip install failed"
        torch_dir="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torch"
        rm -f "$torch_dir/lib/CUDA_STUBS.txt"
        "$py" "$_torch_venv_stubs" make-cuda-stubs "$torch_dir" >&2 \
            || die "building the CUDA stand-in libraries failed"
        msg="$("$py" - <<'EOF'
import torch, sentence_transformers
assert not torch.cuda.is_available()
x = torch.randn(4, 8)
assert torch.allclose(x @ x.T, (x.double() @ x.double().T).float(), atol=1e-4)
print(f"torch {torch.__version__} (CPU) and sentence-transformers "
      f"{sentence_transformers.__version__} import fine")
EOF
        )" || die "the venv does not work (see above); it will be rebuilt on the next run"
        say "$msg"
        printf 'torch==%s sentence-transformers==%s\n' "$torch_version" "$st_version" > "$venv/.bench-ready"
    fi
    "$py" -c 'import torch, sentence_transformers, tokenizers, numpy' 2>/dev/null \
        || die "$venv is marked ready but torch/sentence-transformers do not import: remove $venv/.bench-ready to rebuild it"
    flock -u 9
    exec 9>&-
}

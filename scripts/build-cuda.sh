#!/usr/bin/env bash
# Build `xsent --features cuda` on a machine with no CUDA toolkit and no GPU, from NVIDIA's PyPI
# wheels, and pack it to travel to a GPU machine (see docs/gpu.md).
#
#   scripts/build-cuda.sh            # binary + CUDA test binary, packed into gpu-dist/
#   scripts/build-cuda.sh --no-tests # the binary alone
#   scripts/build-cuda.sh --env      # print the exports for a hand-run `cargo ... --features cuda`
#
# The toolkit: nvcc, the runtime, cccl, crt, nvvm, cuBLAS, cuRAND and NVRTC, all 13.0 (the GPU
# machine's driver is CUDA 13.0; a newer nvcc writes PTX that driver refuses), downloaded once with
# `pip download --no-deps` into ${XSENT_CACHE:-~/.cache/xsent}/cuda-wheels and unzipped into one
# tree (the wheels share the `nvidia/cu13` prefix). The driver library exists only on a GPU
# machine, so the link uses a stub libcuda.so (SONAME libcuda.so.1) made from the driver-API names
# cudarc declares; the real one is loaded at run time.
#
# Settings: XSENT_BUILD_JOBS (default 2: cargo -j and nvcc's parallel files), CUDA_COMPUTE_CAP
# (default 90, the H100/H200), CARGO_TARGET_DIR (default target-cuda, apart from the CPU build),
# XSENT_GPU_DIST (default gpu-dist).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cache="${XSENT_CACHE:-$HOME/.cache/xsent}"
wheels="$cache/cuda-wheels"
tree="$cache/cuda-13.0"
jobs="${XSENT_BUILD_JOBS:-2}"
dist="${XSENT_GPU_DIST:-$root/gpu-dist}"
mode=build
tests=1
for a in "$@"; do
    case "$a" in
        --env) mode=env ;;
        --no-tests) tests=0 ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) echo "build-cuda: unknown argument $a (see --help)" >&2; exit 2 ;;
    esac
done

say() { printf 'build-cuda: %s\n' "$*" >&2; }
die() { printf 'build-cuda: error: %s\n' "$*" >&2; exit 1; }

# 1. The wheels (the pins say 13.0 where the driver cares: nvcc, its PTX back end and the
#    libraries whose headers the kernels include).
pins=(
    "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-cccl==13.0.*"
    "nvidia-cuda-crt==13.0.*" "nvidia-nvvm==13.0.*" "nvidia-cublas==13.0.*"
    "nvidia-curand" "nvidia-cuda-nvrtc==13.0.*"
)
stamp="$(printf '%s\n' "${pins[@]}" v1 | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$tree/.xsent-stamp" 2>/dev/null)" != "$stamp" ]; then
    mkdir -p "$wheels"
    py="$(command -v python3 || command -v python)" || die "python3 with pip is needed to download the CUDA wheels"
    say "downloading the CUDA 13.0 wheels into $wheels (about 660 MB, cuBLAS 420 MB of it; once)"
    "$py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux_2_17_x86_64 -d "$wheels" "${pins[@]}" \
        || die "pip download failed: PyPI must be reachable once (later runs use $wheels)"
    say "unzipping into $tree"
    rm -rf "$tree.tmp" && mkdir -p "$tree.tmp"
    for p in "${pins[@]}"; do
        name="${p%%=*}"
        # The newest wheel of each name in the cache that fits its pin.
        ver=""
        [[ "$p" == *==* ]] && { ver="${p#*==}"; ver="${ver%\*}"; }
        whl="$(ls -1 "$wheels"/"${name//-/_}"-"$ver"*.whl 2>/dev/null | sort -V | tail -n1 || true)"
        [ -n "$whl" ] || die "no wheel for $p in $wheels"
        unzip -q -o "$whl" -d "$tree.tmp"
    done
    rm -rf "$tree" && mv "$tree.tmp" "$tree"
    echo "$stamp" >"$tree/.xsent-stamp"
fi
cuda="$tree/nvidia/cu13"
[ -x "$cuda/bin/nvcc" ] || die "no nvcc at $cuda/bin/nvcc: delete $tree and re-run"
chmod +x "$cuda"/bin/* "$cuda"/nvvm/bin/* 2>/dev/null || true

# 2. Link-time libraries: unversioned names for the wheels' libraries and the libcuda stub.
links="$tree/link"
mkdir -p "$links"
for lib in cublas cublasLt curand nvrtc cudart; do
    so="$(ls -1 "$cuda"/lib/lib"$lib".so.* 2>/dev/null | sort -V | head -n1 || true)"
    [ -n "$so" ] || die "lib$lib.so.* missing in $cuda/lib"
    ln -sf "$so" "$links/lib$lib.so"
done
cudarc="$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.* 2>/dev/null | sort -V | tail -n1 || true)"
if [ -z "$cudarc" ]; then
    say "fetching crates (cudarc's sources name the driver API)"
    cargo fetch -q
    cudarc="$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.* | sort -V | tail -n1)"
fi
if [ ! -s "$links/libcuda.so" ] || [ "$cudarc/src/driver/sys/mod.rs" -nt "$links/libcuda.so" ]; then
    say "making the link-time stub libcuda.so from $cudarc/src/driver/sys/mod.rs"
    grep -oE 'pub unsafe fn cu[A-Za-z0-9_]+\(' "$cudarc/src/driver/sys/mod.rs" | sed -E 's/pub unsafe fn (.*)\(/\1/' | sort -u \
        | awk 'BEGIN { print "/* Link-time stand-in for the CUDA driver; never loaded (its SONAME names the real one). */" } { print "void " $1 "(void) {}" }' \
        >"$links/cuda-stub.c"
    [ "$(grep -c '^void' "$links/cuda-stub.c")" -gt 100 ] || die "found too few driver functions in $cudarc/src/driver/sys/mod.rs"
    cc -shared -fPIC -O0 -Wl,-soname,libcuda.so.1 -o "$links/libcuda.so" "$links/cuda-stub.c"
fi

export CUDA_ROOT="$cuda" CUDA_HOME="$cuda" CUDA_PATH="$cuda" NVCC="$cuda/bin/nvcc"
export PATH="$cuda/bin:$PATH"
export LIBRARY_PATH="$links${LIBRARY_PATH:+:$LIBRARY_PATH}"
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
export CUDAFORGE_THREADS="$jobs"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target-cuda}"
# The kernels' headers and libraries must come from the wheels, not a stray system toolkit.
nvcc --version | grep -q 'release 13.0' || die "nvcc at $cuda/bin is not 13.0: $(nvcc --version | tail -n2 | head -n1)"
if [ "$mode" = env ]; then
    for v in CUDA_ROOT CUDA_HOME CUDA_PATH NVCC PATH LIBRARY_PATH CUDA_COMPUTE_CAP CUDAFORGE_THREADS CARGO_TARGET_DIR; do
        printf 'export %s=%q\n' "$v" "${!v}"
    done
    exit 0
fi

# 3. The build (and the CUDA test binary: the GPU machine has no cargo).
say "cargo build --release --features cuda,profile -j$jobs (target $CARGO_TARGET_DIR; CUDA_COMPUTE_CAP=$CUDA_COMPUTE_CAP)"
cargo build --release --features cuda,profile -j"$jobs" --bin xsent
bin="$CARGO_TARGET_DIR/release/xsent"
[ -x "$bin" ] || die "no binary at $bin after the build"
test_bins=()
if [ "$tests" = 1 ]; then
    say "cargo test --release --features cuda --no-run --test cuda (the GPU's tests: tests/cuda.rs)"
    json="$(cargo test --release --features cuda -j"$jobs" --no-run --test cuda --message-format=json)"
    while IFS= read -r t; do test_bins+=("$t"); done < <(printf '%s\n' "$json" | grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | grep '/deps/cuda-')
    [ "${#test_bins[@]}" -eq 1 ] || die "expected 1 test executable (tests/cuda.rs), got: ${test_bins[*]:-none}"
fi

# 4. Pack: stripped, xz-compressed, with sha256 sums; gpu-check.sh unpacks it.
rm -rf "$dist" && mkdir -p "$dist"
pack() { # path name
    strip -o "$dist/$2" "$1"
    xz -T"$jobs" -9 -f "$dist/$2"
}
pack "$bin" xsent
for t in "${test_bins[@]}"; do
    pack "$t" xsent-cuda-tests
done
(cd "$dist" && sha256sum ./*.xz >SHA256SUMS)
{
    echo "built $(date -u +%Y-%m-%dT%H:%MZ) from $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- src Cargo.toml Cargo.lock || echo ' (with uncommitted changes)')"
    echo "nvcc: $(nvcc --version | grep release)"
    echo "CUDA_COMPUTE_CAP=$CUDA_COMPUTE_CAP"
    echo "needs at run time: libcuda.so.1 (driver >= 580, CUDA 13.0), libcublas.so.13, libcublasLt.so.13, libcurand.so.10, libnvrtc.so.13, libcudart.so.13"
} >"$dist/BUILD"
size="$(du -cb "$dist"/*.xz | tail -n1 | cut -f1)"
say "packed into $dist: $(ls "$dist" | tr '\n' ' ')($((size / 1024 / 1024)) MiB compressed)"
say "run there: scripts/gpu-check.sh (carry gpu-dist), or by hand:"
say "  xz -dc gpu-dist/xsent.xz >/tmp/xsent && chmod +x /tmp/xsent"
say "  LD_LIBRARY_PATH=\"\$(python3 -c 'import nvidia.cu13, os; print(os.path.join(nvidia.cu13.__path__[0], \"lib\"))')\" /tmp/xsent embed --device cuda ..."

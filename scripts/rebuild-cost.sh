#!/usr/bin/env bash
# What one small change costs to rebuild: appends one public function to FILE (default
# crates/runtime/src/executor/task.rs), then times `cargo build --release` and `cargo test --release --no-run`
# (both with ARGS, e.g. --features realsense), and puts the file back. Run it twice: the first run
# also builds whatever was stale. Prints the CPU it ran on, since the seconds mean nothing without it.
#   usage: scripts/rebuild-cost.sh [FILE] [-- cargo args...]
set -euo pipefail
cd "$(dirname "$0")/.."
file=crates/runtime/src/executor/task.rs
if [ $# -gt 0 ] && [ "$1" != "--" ]; then file="$1"; shift; fi
if [ "${1:-}" = "--" ]; then shift; fi
[ -f "$file" ] || { echo "no such file: $file" >&2; exit 2; }
cargo build --release "$@" >/dev/null 2>&1 && cargo test --release --no-run "$@" >/dev/null 2>&1 \
  || { echo "the tree does not build as it is; fix that first" >&2; exit 1; }
backup="$(mktemp)"
cp "$file" "$backup"
trap 'cp "$backup" "$file"; rm -f "$backup"' EXIT
stamp="$(date +%s%N)"
printf '\n/// Rebuild probe.\npub fn rebuild_probe_%s() -> u64 {\n    %s\n}\n' "$stamp" "${stamp:0:9}" >>"$file"
t0=$(date +%s.%N); cargo build --release "$@" >/dev/null 2>&1; t1=$(date +%s.%N)
cargo test --release --no-run "$@" >/dev/null 2>&1; t2=$(date +%s.%N)
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "cpu: $cpu, $(nproc) cores"
printf 'one function added to %s: cargo build --release %.1f s, cargo test --release --no-run %.1f s\n' \
  "$file" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)"

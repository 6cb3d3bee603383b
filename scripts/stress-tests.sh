#!/usr/bin/env bash
# Runs a test command N times beside K busy loops (each a shell spinning on one core), to shake out
# tests that depend on timing. Each run's output goes to a folder; a tally and the failing tests
# are printed at the end, and the exit status is 1 if any run failed.
#
# Usage: scripts/stress-tests.sh [-n RUNS] [-k BUSY_LOOPS] [-o DIR] [-- COMMAND ...]
#   default: 20 runs, 2 busy loops, COMMAND = cargo test --release
# Example (one flaky module, both of its tests at once):
#   scripts/stress-tests.sh -n 10 -k 2 -- cargo test --release -p pointact-apps --lib xarm_sim_task
set -u
runs=20
busy=2
out=target/stress
while [ $# -gt 0 ]; do
  case "$1" in
    -n) runs=$2; shift 2 ;;
    -k) busy=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ $# -eq 0 ]; then
  set -- cargo test --release
fi
case "$runs$busy" in
  *[!0-9]*) echo "-n and -k take whole numbers" >&2; exit 2 ;;
esac
mkdir -p "$out"

# Build first, without the busy loops, so that every run tests and none compiles.
echo "building: $* --no-run"
"$@" --no-run > "$out/build.log" 2>&1 || { echo "the build failed: $out/build.log" >&2; exit 1; }

pids=()
stop_busy() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
# Interrupted (Ctrl-C, kill): stop the loops and the remaining runs, not only the loops.
trap stop_busy EXIT
trap 'stop_busy; exit 130' INT TERM
for _ in $(seq 1 "$busy"); do
  ( while :; do :; done ) &
  pids+=("$!")
done
echo "$busy busy loops on $(nproc) cores; $runs runs of: $*"

failed=0
for i in $(seq 1 "$runs"); do
  log="$out/run-$i.log"
  start=$(date +%s)
  if "$@" > "$log" 2>&1; then
    echo "run $i: ok ($(( $(date +%s) - start )) s)"
  else
    failed=$((failed + 1))
    echo "run $i: FAILED ($(( $(date +%s) - start )) s): $(grep -E '^test .* FAILED$|^    [a-z_:]+$' "$log" | sort -u | tr '\n' ' ')"
  fi
done
echo "$((runs - failed)) of $runs runs passed beside $busy busy loops; logs in $out"
[ "$failed" -eq 0 ]

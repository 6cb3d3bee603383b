#!/usr/bin/env bash
# Makes the venv of the OMPL peer (benches/plan_peer) and installs requirements.txt into it.
# Idempotent and quiet: does nothing when the pinned versions are already there. The last line
# printed is the venv's python, so callers can do  PY=$(bash benches/plan_peer/setup.sh | tail -n1).
#
#   PLAN_PEER_VENV   venv folder   (default ${XDG_CACHE_HOME:-$HOME/.cache}/pointact/planpy)
#   PLAN_PEER_BASE   interpreter that creates it (default: the project's cached pyenv python when
#                    present, else python3); ompl's wheels need CPython 3.10-3.13.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/pointact"
venv="${PLAN_PEER_VENV:-$cache/planpy}"
base="${PLAN_PEER_BASE:-}"
if [ -z "$base" ]; then
  if [ -x "$cache/pyenv/bin/python" ]; then base="$cache/pyenv/bin/python"; else base=python3; fi
fi

if [ ! -x "$venv/bin/python" ]; then
  ver="$("$base" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
    || { echo "no python at '$base' (set PLAN_PEER_BASE)" >&2; exit 1; }
  case "$ver" in
    3.10|3.11|3.12|3.13) ;;
    *) echo "python $ver at '$base': ompl 2.0.1 has wheels for CPython 3.10-3.13 only (set PLAN_PEER_BASE)" >&2; exit 1 ;;
  esac
  "$base" -m venv "$venv" >&2 || { rm -rf "$venv"; echo "'$base -m venv' failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
fi
py="$venv/bin/python"

# Only when a pin is missing or differs (a warm run makes no network request).
. "$here/../pip_pins.sh"
install_pins "$py" "$here/requirements.txt" "CPython 3.10-3.13?"
echo "$py"

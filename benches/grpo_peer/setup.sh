#!/usr/bin/env bash
# Makes the venv of the TRL peer (benches/grpo_peer) and installs requirements.txt into it.
# Idempotent and quiet: does nothing when the pinned versions are already there. The last line
# printed is the venv's python, so callers can do  PY=$(bash benches/grpo_peer/setup.sh | tail -n1).
#
#   GRPO_PEER_VENV       venv folder (default ${XDG_CACHE_HOME:-$HOME/.cache}/pointact/grpo-peer)
#   GRPO_PEER_BASE       interpreter that creates it (default: the project's cached pyenv python
#                        when present, else python3); CPython 3.11-3.13 (the pins: pandas 3,
#                        torch 2.5.1).
#   GRPO_PEER_SEED_FROM  optional: an existing venv of the same Python minor version (e.g. one with
#                        torch 2.5.1) whose site-packages are hard-linked into the new venv before
#                        pip runs, so pip only fetches what is missing or differs instead of
#                        torch's ~2.5 GB of CUDA wheels. Hard links cost no disk; the seed venv is
#                        never written to (pip replaces files by unlinking them).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/pointact"
venv="${GRPO_PEER_VENV:-$cache/grpo-peer}"
base="${GRPO_PEER_BASE:-}"
if [ -z "$base" ]; then
  if [ -x "$cache/pyenv/bin/python" ]; then base="$cache/pyenv/bin/python"; else base=python3; fi
fi
minor() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }

if [ ! -x "$venv/bin/python" ]; then
  ver="$(minor "$base")" || { echo "no python at '$base' (set GRPO_PEER_BASE)" >&2; exit 1; }
  case "$ver" in
    3.11|3.12|3.13) ;;
    *) echo "python $ver at '$base': the pins need CPython 3.11-3.13 (set GRPO_PEER_BASE)" >&2; exit 1 ;;
  esac
  "$base" -m venv "$venv" >&2 || { rm -rf "$venv"; echo "'$base -m venv' failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
  seed="${GRPO_PEER_SEED_FROM:-}"
  if [ -n "$seed" ]; then
    if [ -x "$seed/bin/python" ] && [ "$(minor "$seed/bin/python")" = "$ver" ]; then
      src="$(echo "$seed"/lib/python"$ver"/site-packages)"
      dst="$(echo "$venv"/lib/python"$ver"/site-packages)"
      echo "seeding $venv from $src (hard links)" >&2
      for entry in "$src"/*; do
        name="$(basename "$entry")"
        [ -e "$dst/$name" ] || cp -al "$entry" "$dst/$name" 2>/dev/null || cp -a "$entry" "$dst/$name"
      done
    else
      echo "GRPO_PEER_SEED_FROM=$seed is not a Python $ver venv: not seeding" >&2
    fi
  fi
fi
py="$venv/bin/python"

# Only when a pin is missing or differs (a warm run makes no network request).
. "$here/../pip_pins.sh"
install_pins "$py" "$here/requirements.txt" "CPython 3.11-3.13?"
echo "$py"

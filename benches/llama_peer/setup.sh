#!/usr/bin/env bash
# Installs the llama.cpp peer of `pointact bench vlm`: node-llama-cpp 3.21.1 and its prebuilt
# linux-x64 CPU binaries (package.json beside this file, exact pins), ~83 MB. Idempotent: does
# nothing when both pinned versions are already installed, so a warm run makes no network request.
# Nothing is compiled: install scripts are skipped (npm 11 blocks them anyway) and the optional
# CUDA/Vulkan/ARM binary packages (~650 MB) are left out. The last line printed is the install
# folder, so callers can do  DIR=$(bash benches/llama_peer/setup.sh | tail -n1).
#
#   POINTACT_LLAMA_PEER  install folder (default ${XDG_CACHE_HOME:-$HOME/.cache}/pointact/llama-peer)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${POINTACT_LLAMA_PEER:-${XDG_CACHE_HOME:-$HOME/.cache}/pointact/llama-peer}"

command -v node >/dev/null 2>&1 || { echo "node not found: install Node.js >= 20 (e.g. apt-get install nodejs npm) for the llama.cpp peer" >&2; exit 3; }
command -v npm >/dev/null 2>&1 || { echo "npm not found: install npm (Node.js >= 20) for the llama.cpp peer" >&2; exit 3; }
major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$major" -ge 20 ] || { echo "node $(node --version): node-llama-cpp 3.21.1 needs Node.js >= 20" >&2; exit 3; }

installed() { # the version in $dir/node_modules/$1/package.json, or nothing
  node -p "require('$dir/node_modules/$1/package.json').version" 2>/dev/null || true
}
mkdir -p "$dir"
cp "$here/package.json" "$dir/package.json"
if [ "$(installed node-llama-cpp)" != 3.21.1 ] || [ "$(installed @node-llama-cpp/linux-x64)" != 3.21.1 ]; then
  echo "installing node-llama-cpp 3.21.1 into $dir (npm registry, ~83 MB) ..." >&2
  (cd "$dir" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm i -E --omit=optional --ignore-scripts \
      --no-audit --no-fund --loglevel=error >&2) \
    || { echo "npm could not install node-llama-cpp 3.21.1 into $dir (npm registry reachable?)" >&2; exit 1; }
fi
echo "$dir"

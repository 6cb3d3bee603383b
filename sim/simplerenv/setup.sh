#!/usr/bin/env bash
# One command for `run.py --env maniskill3` (ManiSkill3's Bridge digital twins of SimplerEnv's WidowX tasks):
#   1. a pinned venv (mani-skill 3.0.1 + run.py's client packages),
#   2. a Vulkan check (CPU rendering needs Mesa >= 25 lavapipe),
#   3. the assets with ManiSkill's own downloader, or (--assets DIR) assembled from local copies of two public
#      repositories, into the folder ManiSkill reads ($MS_ASSET_DIR/data/...),
#   4. optionally (--stand-in-table) flat collision boxes in place of missing stages (and a one-colour eggplant mesh
#      in place of its missing visual mesh); runs with them say "stand-in table — not official SimplerEnv numbers",
#   5. a smoke check (reset, step, render, depth against the object mesh) on the carrot task.
#
#   sim/simplerenv/setup.sh [--assets DIR] [--stand-in-table] [--prefix DIR] [--python python3] [--skip-venv] [--skip-check]
#
# DIR holds checkouts of simpler-env/ManiSkill2_real2sim and haosulab/ManiSkill-WidowX250S (tag v0.2.0), or is already
# a ManiSkill asset folder (DIR/data/tasks/bridge_v2_real2sim_dataset, DIR/data/robots/widowx). See README.md
# ("ManiSkill3") for what each file is and which ones are Git LFS objects.
# Everything goes under --prefix (default ~/.cache/pointact/maniskill3): venv/ and assets/ (= MS_ASSET_DIR).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PREFIX="${HOME}/.cache/pointact/maniskill3"
PYTHON=python3
ASSETS=""
STAND_IN=0
SKIP_VENV=0
SKIP_CHECK=0
STAND_IN_LABEL="stand-in table — not official SimplerEnv numbers"

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --assets) ASSETS="$2"; shift 2 ;;
    --prefix) PREFIX="$2"; shift 2 ;;
    --python) PYTHON="$2"; shift 2 ;;
    --stand-in-table) STAND_IN=1; shift ;;
    --skip-venv) SKIP_VENV=1; shift ;;
    --skip-check) SKIP_CHECK=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done

VENV="$PREFIX/venv"
MS_ASSET_DIR="$PREFIX/assets"
BRIDGE="$MS_ASSET_DIR/data/tasks/bridge_v2_real2sim_dataset"
WIDOWX="$MS_ASSET_DIR/data/robots/widowx"
PY="$VENV/bin/python"

# Versions as resolved by `pip install mani-skill==3.0.1` (sapien 3.0.3, gymnasium 1.4.0); openpi-client 0.1.2 imports
# typing_extensions without declaring it. torch from PyPI brings its CUDA libraries (~6.6 GB venv in all); they are
# needed for `import torch` even on a CPU-only machine.
PINS=(
  mani-skill==3.0.1 sapien==3.0.3 gymnasium==1.4.0 torch==2.14.1 numpy==1.26.4 scipy==1.17.1 trimesh==5.2.0
  mplib==0.1.1 opencv-python==4.11.0.86 pillow==13.0.0
  openpi-client==0.1.2 typing_extensions==4.12.2 msgpack==1.2.4 websockets==17.4
)

# ---------------------------------------------------------------------------------------------------------------- venv
if [ "$SKIP_VENV" = 0 ]; then
  "$PYTHON" - <<'EOF' || { echo "error: $PYTHON is not Python 3.9..3.12 (sapien 3.0.3 wheels)" >&2; exit 1; }
import sys; sys.exit(0 if (3, 9) <= sys.version_info[:2] <= (3, 12) else 1)
EOF
  mkdir -p "$PREFIX"
  [ -x "$PY" ] || "$PYTHON" -m venv "$VENV"
  echo "== pip install into $VENV (first time: ~2 min, ~6.6 GB)"
  "$PY" -m pip install -q --upgrade pip
  "$PY" -m pip install -q "${PINS[@]}"
  "$PY" -m pip check >/dev/null || "$PY" -m pip check || true
fi
[ -x "$PY" ] || { echo "error: no venv at $VENV (run without --skip-venv)" >&2; exit 1; }

# -------------------------------------------------------------------------------------------------------------- Vulkan
echo "== Vulkan"
mesa=""
if command -v dpkg-query >/dev/null 2>&1; then
  mesa="$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null || true)"
fi
vk_help() {
  cat >&2 <<EOF
ManiSkill3 (sapien 3.0.3) renders with Vulkan. Without an NVIDIA GPU (driver + its Vulkan ICD) it needs Mesa's
lavapipe, version 25 or newer (Debian 12's stock Mesa 22.3 is rejected). On Debian 12 (bookworm):
  add the suite bookworm-backports (deb.debian.org/debian, component main) to the apt sources, then
  apt-get update && apt-get install -y -t bookworm-backports mesa-vulkan-drivers libvulkan1
On Debian 13 / Ubuntu 25.04 or newer: apt-get install -y mesa-vulkan-drivers libvulkan1.
If several ICDs are installed: export VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.json (lavapipe).
EOF
}
if [ -n "$mesa" ]; then
  major="${mesa%%.*}"; major="${major##*:}"
  echo "mesa-vulkan-drivers $mesa"
  if [ "$major" -lt 25 ] 2>/dev/null; then
    echo "warning: Mesa $mesa lavapipe is too old for sapien 3 (needs >= 25) unless an NVIDIA GPU is used" >&2
  fi
fi
if ! "$PY" - <<'EOF'
import sys
try:
    import sapien, sapien.render
    sc = sapien.Scene()
    sc.add_ground(0)
    cam = sc.add_camera("probe", 64, 48, 1.0, 0.01, 10)
    cam.entity.set_pose(sapien.Pose([-1, 0, 0.5]))
    sc.update_render()
    cam.take_picture()
    assert cam.get_picture("Color").shape == (48, 64, 4)
except Exception as e:  # sapien raises RuntimeError when no suitable device exists
    print(f"Vulkan render probe failed: {type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(1)
print(sapien.render.get_device_summary().strip().splitlines()[0])
EOF
then
  vk_help; exit 1
fi

# -------------------------------------------------------------------------------------------------------------- assets
is_lfs_pointer() { head -c 40 "$1" 2>/dev/null | grep -q '^version https://git-lfs'; }
find_dir() {  # find_dir ROOT NAME...: first directory below ROOT (depth <= 2) with one of the names
  local root="$1"; shift
  for n in "$@"; do
    for d in "$root/$n" "$root"/*/"$n"; do [ -d "$d" ] && { echo "$d"; return 0; }; done
  done
  return 1
}
copy_file() {  # copy_file SRC DST: skip absent files and LFS pointers
  if [ -f "$1" ] && ! is_lfs_pointer "$1"; then mkdir -p "$(dirname "$2")"; cp -f "$1" "$2"; return 0; fi
  return 1
}
if [ -n "$ASSETS" ]; then
  echo "== assets from $ASSETS -> $MS_ASSET_DIR"
  [ -d "$ASSETS" ] || { echo "error: --assets $ASSETS is not a folder" >&2; exit 1; }
  mkdir -p "$BRIDGE" "$WIDOWX"
  if [ -d "$ASSETS/data/tasks/bridge_v2_real2sim_dataset" ]; then
    # already ManiSkill's layout (e.g. an unpacked bridge_v2_real2sim_dataset.zip + widowx robot)
    cp -rf "$ASSETS/data/tasks/bridge_v2_real2sim_dataset/." "$BRIDGE/"
    [ -d "$ASSETS/data/robots/widowx" ] && cp -rf "$ASSETS/data/robots/widowx/." "$WIDOWX/"
  else
    R2S="$(find_dir "$ASSETS" ManiSkill2_real2sim)" || { echo "error: no ManiSkill2_real2sim checkout under $ASSETS" >&2; exit 1; }
    WX="$(find_dir "$ASSETS" ManiSkill-WidowX250S ManiSkill-WidowX250S-0.2.0)" || { echo "error: no ManiSkill-WidowX250S checkout under $ASSETS" >&2; exit 1; }
    echo "ManiSkill2_real2sim: $R2S"; echo "ManiSkill-WidowX250S: $WX"
    # bridge_v2_real2sim_dataset/{custom,real_inpainting,stages} <- ManiSkill2_real2sim/data/{custom,real_inpainting,
    # hab2_bench_assets/stages}; LFS pointers (files >= 4 MiB not pulled) are left out and reported below
    (cd "$R2S/data" && find custom real_inpainting -type f) | while read -r f; do
      copy_file "$R2S/data/$f" "$BRIDGE/$f" || true
    done
    for s in bridge_table_1_v1.glb bridge_table_1_v2.glb; do
      if copy_file "$R2S/data/hab2_bench_assets/stages/$s" "$BRIDGE/stages/$s"; then
        rm -f "$BRIDGE/stages/$s.STAND_IN.txt"  # a real stage replaces a stand-in
      fi
    done
    (cd "$WX" && find . -type f ! -path './.git/*') | while read -r f; do copy_file "$WX/$f" "$WIDOWX/$f" || true; done
  fi
fi

if [ -z "$ASSETS" ]; then
  # ManiSkill's own downloader (mani_skill/utils/assets/data.py): the Bridge task assets from Hugging Face
  # (haosulab/ManiSkill_bridge_v2_real2sim) and the WidowX 250S robot from GitHub (haosulab/ManiSkill-WidowX250S v0.2.0).
  for uid in bridge_v2_real2sim widowx250s; do
    case "$uid" in bridge_v2_real2sim) have="$BRIDGE/custom" ;; *) have="$WIDOWX/wx250s.urdf" ;; esac
    if [ -e "$have" ]; then echo "== assets: $uid already in $MS_ASSET_DIR"; continue; fi
    echo "== assets: $uid with ManiSkill's downloader -> $MS_ASSET_DIR"
    if ! MS_ASSET_DIR="$MS_ASSET_DIR" "$PY" -m mani_skill.utils.download_asset "$uid" -y; then
      echo "error: ManiSkill's downloader could not fetch $uid (huggingface.co and github.com reachable?); without" \
        "them, clone the two public repositories and pass --assets DIR (README.md, \"ManiSkill3\")" >&2
      exit 1
    fi
  done
fi

if [ "$STAND_IN" = 1 ]; then
  echo "== stand-ins for missing files ($STAND_IN_LABEL); real files are kept"
  MS_ASSET_DIR="$MS_ASSET_DIR" "$PY" "$HERE/maniskill3.py" write-stand-in-table --assets "$MS_ASSET_DIR"
fi

echo "== asset check ($MS_ASSET_DIR)"
ready=()
for task in widowx_spoon_on_towel widowx_carrot_on_plate widowx_stack_cube widowx_put_eggplant_in_basket; do
  miss="$(MS_ASSET_DIR="$MS_ASSET_DIR" "$PY" -c "import sys; sys.path.insert(0, '$HERE'); import maniskill3 as m; print(' '.join(m.missing_files('$task')))")"
  if [ -z "$miss" ]; then ready+=("$task"); echo "ok       $task"; else echo "MISSING  $task: $miss"; fi
done
MS_ASSET_DIR="$MS_ASSET_DIR" "$PY" -c "import sys; sys.path.insert(0, '$HERE'); import maniskill3 as m
for f in m.stand_ins(): print('stand-in  ' + f + ': ' + m.STAND_IN_LABEL)"
if [ ${#ready[@]} -lt 4 ]; then
  echo "note: the stages and the eggplant's textured.dae are Git LFS objects of ManiSkill2_real2sim: run 'git lfs pull' in that checkout and rerun with --assets, or pass --stand-in-table"
fi

# --------------------------------------------------------------------------------------------------------------- check
if [ "$SKIP_CHECK" = 0 ] && printf '%s\n' "${ready[@]}" | grep -qx widowx_carrot_on_plate; then
  echo "== smoke check: reset, step, render, depth vs mesh, action conversion (carrot task)"
  if ! MS_ASSET_DIR="$MS_ASSET_DIR" nice -n 10 "$PY" "$HERE/maniskill3.py" check --task widowx_carrot_on_plate 2>&1 \
    | grep -E '^(check|ep |widowx|error|Traceback)'; then
    echo "error: the smoke check failed (run: MS_ASSET_DIR=$MS_ASSET_DIR $PY $HERE/maniskill3.py check --json)" >&2
    exit 1
  fi
fi

cat <<EOF

Ready tasks: ${ready[*]:-none}
Run (server first: pointact serve bridge --addr 127.0.0.1:8000):
  MS_ASSET_DIR=$MS_ASSET_DIR $PY $HERE/run.py --server 127.0.0.1:8000 --env maniskill3 --tasks ${ready[0]:-widowx_carrot_on_plate} --episodes 0-23
EOF

# Sourced by the *-from-wheel(s).sh scripts: the one way they make their private venv.
# Needs `say`, `die`, `$python` and `$dir` (absolute) from the caller; sets `venv` and `vpy`.
venv="$dir/venv"
if [ ! -x "$venv/bin/python" ]; then
  say "creating venv $venv"
  if ! "$python" -m venv "$venv" >&2; then
    rm -rf "$venv"
    die "'$python -m venv' failed: on Debian install the venv module: apt-get install python3-venv"
  fi
fi
vpy="$venv/bin/python"

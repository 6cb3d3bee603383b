# Sourced by the peers' setup.sh scripts: `install_pins PYTHON REQUIREMENTS HINT` installs the exact
# pins of REQUIREMENTS (`name==version` lines, `#` comments) into PYTHON's environment, only when one
# is missing or differs, so a warm run makes no network request. Wheels only; HINT ends the error
# message (which Python versions the pins have wheels for).
install_pins() {
  local py="$1" reqs="$2" hint="$3"
  if ! "$py" - "$reqs" <<'PYEOF'
import importlib.metadata as m, sys
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    name, want = line.split("==")
    try:
        have = m.version(name)
    except m.PackageNotFoundError:
        sys.exit(1)
    if have != want:
        sys.exit(1)
PYEOF
  then
    "$py" -m pip install --quiet --disable-pip-version-check --only-binary=:all: -r "$reqs" >&2 \
      || { echo "pip could not install $reqs (PyPI reachable? $hint)" >&2; exit 1; }
  fi
}

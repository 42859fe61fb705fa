# Sourced by scripts/test: a virtualenv with crates/system-tests/tests/python/requirements.txt
# installed, for tests that drive toolmesh from Python (the official MCP
# client). Exports TOOLMESH_TEST_PYTHON, the venv's interpreter; tests that
# need it fail (not skip) when it is unset.
# Reinstalls only when requirements.txt changed since the last install.
venv="${TOOLMESH_VENV:-$PWD/target/venv}"
requirements="$PWD/crates/system-tests/tests/python/requirements.txt"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "prepare: python venv at $venv from $requirements" >&2
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
    echo "$want" > "$stamp"
fi
export TOOLMESH_TEST_PYTHON="$venv/bin/python"

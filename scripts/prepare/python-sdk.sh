# The Python executor SDK (sdk/python) as a user installs it, for
# crates/system-tests/tests/python_sdk.rs and crates/system-tests/tests/readme.rs:
# a fresh virtualenv, target/venv-sdk, with `pip install ./sdk/python` and the
# type checker sdk/python/requirements-typecheck.txt pins (scripts/test runs
# it), made again whenever a file under sdk/python changes (the stamp is a
# hash of them all). Also
# target/venv-sdk-gen with the grpcio-tools sdk/python/requirements-generate.txt
# pins, to check that the committed stubs match proto/. Exports
# TOOLMESH_TEST_PYTHON_SDK and TOOLMESH_TEST_PYTHON_SDK_GEN (their pythons).
python_sdk_venv="$PWD/target/venv-sdk"
python_sdk_hash="$(find sdk/python -type f ! -path '*/__pycache__/*' ! -path '*/.mypy_cache/*' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)"
if [ ! -x "$python_sdk_venv/bin/python" ] || [ "$(cat "$python_sdk_venv/.sdk.sha256" 2>/dev/null)" != "$python_sdk_hash" ]; then
    echo "prepare: installing sdk/python into a fresh $python_sdk_venv" >&2
    rm -rf "$python_sdk_venv"
    python3 -m venv "$python_sdk_venv"
    "$python_sdk_venv/bin/python" -m pip install --quiet --disable-pip-version-check ./sdk/python
    "$python_sdk_venv/bin/python" -m pip install --quiet --disable-pip-version-check -r sdk/python/requirements-typecheck.txt
    echo "$python_sdk_hash" > "$python_sdk_venv/.sdk.sha256"
fi
export TOOLMESH_TEST_PYTHON_SDK="$python_sdk_venv/bin/python"

python_sdk_gen="$PWD/target/venv-sdk-gen"
python_sdk_hash="$(sha256sum sdk/python/requirements-generate.txt | cut -d' ' -f1)"
if [ ! -x "$python_sdk_gen/bin/python" ] || [ "$(cat "$python_sdk_gen/.requirements.sha256" 2>/dev/null)" != "$python_sdk_hash" ]; then
    echo "prepare: installing sdk/python/requirements-generate.txt into $python_sdk_gen" >&2
    python3 -m venv "$python_sdk_gen"
    "$python_sdk_gen/bin/python" -m pip install --quiet --disable-pip-version-check -r sdk/python/requirements-generate.txt
    echo "$python_sdk_hash" > "$python_sdk_gen/.requirements.sha256"
fi
export TOOLMESH_TEST_PYTHON_SDK_GEN="$python_sdk_gen/bin/python"
unset python_sdk_venv python_sdk_gen python_sdk_hash

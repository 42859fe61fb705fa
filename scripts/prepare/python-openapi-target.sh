# The virtualenv of the HTTP API crates/system-tests/tests/bridge_openapi.rs
# bridges (crates/system-tests/tests/python/openapi_target): FastAPI and
# uvicorn at the versions its requirements.txt pins, in
# target/venv-openapi-target. Exports TOOLMESH_TEST_PYTHON_OPENAPI_TARGET
# (its python).
python_openapi_target_venv="$PWD/target/venv-openapi-target"
python_openapi_target_requirements=crates/system-tests/tests/python/openapi_target/requirements.txt
python_openapi_target_stamp="$python_openapi_target_venv/requirements.txt"
if ! cmp -s "$python_openapi_target_requirements" "$python_openapi_target_stamp"; then
    echo "prepare: installing $python_openapi_target_requirements into $python_openapi_target_venv" >&2
    python3 -m venv "$python_openapi_target_venv"
    "$python_openapi_target_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        -r "$python_openapi_target_requirements"
    cp "$python_openapi_target_requirements" "$python_openapi_target_stamp"
fi
export TOOLMESH_TEST_PYTHON_OPENAPI_TARGET="$python_openapi_target_venv/bin/python"
unset python_openapi_target_venv python_openapi_target_requirements python_openapi_target_stamp

# The virtualenv of the Python executor example (examples/python), which
# crates/system-tests/tests/python_executor.rs runs against a real mesh: grpcio, grpcio-tools
# and grpcio-health-checking at the versions examples/python/requirements.txt
# pins, in target/venv-executor. Exports TOOLMESH_TEST_PYTHON_EXECUTOR (its
# python).
python_executor_venv="$PWD/target/venv-executor"
python_executor_stamp="$python_executor_venv/requirements.txt"
if ! cmp -s examples/python/requirements.txt "$python_executor_stamp"; then
    echo "prepare: installing examples/python/requirements.txt into $python_executor_venv" >&2
    python3 -m venv "$python_executor_venv"
    "$python_executor_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        -r examples/python/requirements.txt
    cp examples/python/requirements.txt "$python_executor_stamp"
fi
export TOOLMESH_TEST_PYTHON_EXECUTOR="$python_executor_venv/bin/python"
unset python_executor_venv python_executor_stamp

# The virtualenv of the gRPC service crates/system-tests/tests/bridge_grpc.rs
# bridges (crates/system-tests/tests/python/grpc_target): grpcio,
# grpcio-tools and grpcio-reflection at the versions its requirements.txt
# pins, in target/venv-grpc-target. Exports TOOLMESH_TEST_PYTHON_GRPC_TARGET
# (its python).
python_grpc_target_venv="$PWD/target/venv-grpc-target"
python_grpc_target_requirements=crates/system-tests/tests/python/grpc_target/requirements.txt
python_grpc_target_stamp="$python_grpc_target_venv/requirements.txt"
if ! cmp -s "$python_grpc_target_requirements" "$python_grpc_target_stamp"; then
    echo "prepare: installing $python_grpc_target_requirements into $python_grpc_target_venv" >&2
    python3 -m venv "$python_grpc_target_venv"
    "$python_grpc_target_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        -r "$python_grpc_target_requirements"
    cp "$python_grpc_target_requirements" "$python_grpc_target_stamp"
fi
export TOOLMESH_TEST_PYTHON_GRPC_TARGET="$python_grpc_target_venv/bin/python"
unset python_grpc_target_venv python_grpc_target_requirements python_grpc_target_stamp

# Sourced by hand before `toolmesh bench search --eval` (never by the test
# command: no test needs it).
# The public data of the tool-search retrieval evaluation
# (`toolmesh bench search --eval`): the Berkeley Function Calling
# Leaderboard's questions, functions and answers from the PyPI package
# bfcl-eval at the version pinned here, downloaded without its
# dependencies and unpacked (never imported) into target/bfcl, and the
# plain BM25 the evaluation compares against (rank_bm25) in its own
# virtualenv, target/venv-bfcl. Exports TOOLMESH_BFCL_DATA (the package's
# bfcl_eval/data) and TOOLMESH_BFCL_PYTHON (the venv's python).
bfcl_version=2026.3.23
bfcl_baseline="rank-bm25==0.2.2 numpy==2.2.6"
bfcl_root="$PWD/target/bfcl"
bfcl_venv="$PWD/target/venv-bfcl"
bfcl_stamp="$bfcl_root/pinned"
if [ "$(cat "$bfcl_stamp" 2>/dev/null)" != "bfcl-eval==$bfcl_version $bfcl_baseline" ]; then
    echo "prepare: downloading bfcl-eval==$bfcl_version into $bfcl_root" >&2
    rm -rf "$bfcl_root" && mkdir -p "$bfcl_root/wheel"
    python3 -m venv "$bfcl_venv"
    "$bfcl_venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
        --dest "$bfcl_root/wheel" "bfcl-eval==$bfcl_version"
    "$bfcl_venv/bin/python" -m zipfile -e "$bfcl_root"/wheel/bfcl_eval-*.whl "$bfcl_root/unpacked"
    # shellcheck disable=SC2086 # the pins are separate words
    "$bfcl_venv/bin/python" -m pip install --quiet --disable-pip-version-check $bfcl_baseline
    echo "bfcl-eval==$bfcl_version $bfcl_baseline" >"$bfcl_stamp"
fi
export TOOLMESH_BFCL_DATA="$bfcl_root/unpacked/bfcl_eval/data"
export TOOLMESH_BFCL_PYTHON="$bfcl_venv/bin/python"
unset bfcl_version bfcl_baseline bfcl_root bfcl_venv bfcl_stamp

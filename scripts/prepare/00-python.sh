# Sourced by scripts/test first among the prepare scripts: the Python the
# other scripts build virtualenvs with (python3 with venv and pip), from
# Debian's packages when the machine lacks it.
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    apt_install python3 python3-venv python3-pip || true
fi

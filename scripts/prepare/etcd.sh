# Sourced by scripts/test: makes sure an `etcd` server binary is at hand for
# the etcd-store tests and exports TOOLMESH_TEST_ETCD (its path). Installs
# Debian's etcd-server with apt when it is missing; when that cannot be done
# it says so and the etcd tests fail (they never skip).
if [ -z "${TOOLMESH_TEST_ETCD:-}" ]; then
    if ! command -v etcd >/dev/null 2>&1; then
        apt_install etcd-server \
            || echo "scripts/prepare/etcd.sh: without etcd the etcd tests fail; or set TOOLMESH_TEST_ETCD=/path/to/etcd" >&2
    fi
    if command -v etcd >/dev/null 2>&1; then
        TOOLMESH_TEST_ETCD="$(command -v etcd)"
        export TOOLMESH_TEST_ETCD
    fi
fi

# Sourced by scripts/test: makes sure an `etcd` server binary is at hand for
# the etcd-store tests and exports TOOLMESH_TEST_ETCD (its path). Installs
# Debian's etcd-server with apt when it is missing; when that cannot be done
# it says so and the etcd tests fail (they never skip).
if [ -z "${TOOLMESH_TEST_ETCD:-}" ]; then
    if ! command -v etcd >/dev/null 2>&1; then
        echo "scripts/prepare/etcd.sh: etcd is missing; installing Debian's etcd-server" >&2
        if command -v apt-get >/dev/null 2>&1; then
            if [ "$(id -u)" = 0 ]; then apt=(apt-get); else apt=(sudo -n apt-get); fi
            "${apt[@]}" update -qq >&2 \
                && DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq etcd-server >&2 \
                || echo "scripts/prepare/etcd.sh: could not install etcd-server; install it (apt-get install etcd-server) or set TOOLMESH_TEST_ETCD=/path/to/etcd, else the etcd tests fail" >&2
        else
            echo "scripts/prepare/etcd.sh: no apt-get here; install etcd 3.4+ and set TOOLMESH_TEST_ETCD=/path/to/etcd, else the etcd tests fail" >&2
        fi
    fi
    if command -v etcd >/dev/null 2>&1; then
        TOOLMESH_TEST_ETCD="$(command -v etcd)"
        export TOOLMESH_TEST_ETCD
    fi
fi

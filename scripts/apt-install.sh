# Sourced by scripts/test before scripts/prepare/*.sh: `apt_install PKG…`
# installs Debian packages (as root, or through passwordless sudo), running
# `apt-get update` once per run; it fails with a message naming what to
# install by hand when it cannot.
apt_updated=""
apt_install() {
    local apt
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "prepare: no apt-get here; install $* by hand" >&2
        return 1
    fi
    if [ "$(id -u)" = 0 ]; then apt=(apt-get); else apt=(sudo -n apt-get); fi
    echo "prepare: installing $*" >&2
    if [ -z "$apt_updated" ]; then
        "${apt[@]}" update -qq >&2 || return 1
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq --no-install-recommends "$@" >&2 \
        || { echo "prepare: could not install $*; install them by hand" >&2; return 1; }
}

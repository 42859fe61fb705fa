# Sourced by scripts/test: nginx, so the bench's smoke test measures the
# nginx `grpc_pass` column too (it fails, never skips, without it). Exports
# TOOLMESH_NGINX (Debian installs it in /usr/sbin, off a user's PATH).
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
if [ ! -x "$nginx_bin" ]; then
    apt_install nginx-light || true
    nginx_bin=/usr/sbin/nginx
fi
if [ -x "$nginx_bin" ]; then
    export TOOLMESH_NGINX="$nginx_bin"
fi

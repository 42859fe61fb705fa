# Sourced by scripts/test: makes sure a Prometheus server and its promtool
# are at hand for crates/system-tests/tests/prometheus.rs (promtool check metrics / check rules /
# test rules, and a real Prometheus scraping a mesh on loopback). Installs
# Debian's prometheus (2.42, which brings promtool) with apt when either is
# missing; exports TOOLMESH_TEST_PROMETHEUS and TOOLMESH_TEST_PROMTOOL
# (their paths). When that cannot be done it says so and the Prometheus
# tests fail (they never skip).
if [ -z "${TOOLMESH_TEST_PROMETHEUS:-}" ] || [ -z "${TOOLMESH_TEST_PROMTOOL:-}" ]; then
    if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
        apt_install prometheus \
            || echo "scripts/prepare/prometheus.sh: without prometheus the Prometheus tests fail; or set TOOLMESH_TEST_PROMETHEUS and TOOLMESH_TEST_PROMTOOL" >&2
    fi
    if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
        TOOLMESH_TEST_PROMETHEUS="$(command -v prometheus)"
        TOOLMESH_TEST_PROMTOOL="$(command -v promtool)"
        export TOOLMESH_TEST_PROMETHEUS TOOLMESH_TEST_PROMTOOL
    fi
fi

# Sourced by scripts/test: the reference MCP servers the bridge is tested
# against (crates/system-tests/tests/bridge.rs), pinned, installed with npm into target/npm.
# Exports TOOLMESH_TEST_MCP_EVERYTHING and TOOLMESH_TEST_MCP_FILESYSTEM,
# each a command that starts one over stdio, and TOOLMESH_TEST_NPM_PREFIX
# (below it, the README's `npx -y …@VERSION` finds them without the
# network); tests that need them fail (not skip) when they are unset.
# Needs Node 20 or newer and npm (from Debian's packages when missing).
npm_mcp_dir="$PWD/target/npm"
npm_mcp_packages="@modelcontextprotocol/server-everything@2026.8.31 @modelcontextprotocol/server-filesystem@2026.8.31"
if ! command -v npm >/dev/null 2>&1; then
    apt_install nodejs npm || true
fi
if [ "$(cat "$npm_mcp_dir/.packages" 2>/dev/null)" != "$npm_mcp_packages" ]; then
    echo "prepare: npm install $npm_mcp_packages into $npm_mcp_dir" >&2
    mkdir -p "$npm_mcp_dir"
    # shellcheck disable=SC2086 # one word per package
    if npm install --prefix "$npm_mcp_dir" --no-audit --no-fund --silent $npm_mcp_packages >&2; then
        echo "$npm_mcp_packages" > "$npm_mcp_dir/.packages"
    else
        echo "prepare: npm could not install $npm_mcp_packages" >&2
    fi
fi
export TOOLMESH_TEST_NPM_PREFIX="$npm_mcp_dir"
export TOOLMESH_TEST_MCP_EVERYTHING="$npm_mcp_dir/node_modules/.bin/mcp-server-everything"
export TOOLMESH_TEST_MCP_FILESYSTEM="$npm_mcp_dir/node_modules/.bin/mcp-server-filesystem"
unset npm_mcp_dir npm_mcp_packages

# Sourced by scripts/test: cargo-machete, which fails the run when a crate
# declares a dependency no code of it uses. Installed (pinned) from
# crates.io into target/cargo-tools when missing; exports
# TOOLMESH_CARGO_MACHETE (its path). Crates whose generated code or library
# name hides a use list it under [package.metadata.cargo-machete].
machete_version="0.9.2"
machete_bin="$PWD/target/cargo-tools/bin/cargo-machete"
if [ "$("$machete_bin" --version 2>/dev/null)" != "$machete_version" ]; then
    echo "prepare: installing cargo-machete $machete_version into target/cargo-tools" >&2
    cargo install --quiet --locked --version "$machete_version" --root "$PWD/target/cargo-tools" cargo-machete
fi
export TOOLMESH_CARGO_MACHETE="$machete_bin"
unset machete_version machete_bin

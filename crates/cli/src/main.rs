//! The `toolmesh` command.

/// mimalloc: glibc's malloc serialises the runtime's threads on its arena
/// locks under load (seen in profiles of the dispatcher's call path).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    toolmesh_cli::main()
}

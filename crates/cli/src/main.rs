//! The `toolmesh` command.

fn main() -> std::process::ExitCode {
    toolmesh_cli::main()
}

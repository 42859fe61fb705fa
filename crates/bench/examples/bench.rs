//! Runs the benchmark without the CLI:
//! `cargo run --release -p toolmesh-bench --example bench -- [--toolmesh PATH] [--quick] [--json PATH]`
//! (the toolmesh binary defaults to `target/release/toolmesh`).

use std::path::PathBuf;
use std::process::ExitCode;
use toolmesh_bench::{BenchOptions, run};

fn main() -> ExitCode {
    let mut options = BenchOptions {
        toolmesh_exe: PathBuf::from("target/release/toolmesh"),
        quick: false,
        json: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => options.quick = true,
            "--toolmesh" | "--json" => {
                let Some(value) = args.next() else {
                    eprintln!("{arg} needs a path");
                    return ExitCode::from(64);
                };
                if arg == "--json" {
                    options.json = Some(value.into());
                } else {
                    options.toolmesh_exe = value.into();
                }
            }
            _ => {
                eprintln!("usage: bench [--toolmesh PATH] [--quick] [--json PATH]");
                return ExitCode::from(64);
            }
        }
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(options)) {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

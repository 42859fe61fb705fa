//! Runs the benchmark without the CLI:
//! `cargo run --release -p toolmesh-bench --example bench -- [--toolmesh PATH] [--fixture PATH] [--quick] [--json PATH]`
//! (the toolmesh binary defaults to `target/release/toolmesh`, the fixture
//! server to `target/release/toolmesh-fixture`: `cargo build --release -p toolmesh-fixtures`).

use std::path::PathBuf;
use std::process::ExitCode;
use toolmesh_bench::{BenchOptions, run};

fn main() -> ExitCode {
    let mut options = BenchOptions {
        toolmesh_exe: PathBuf::from("target/release/toolmesh"),
        fixture_exe: PathBuf::from("target/release/toolmesh-fixture"),
        // Children are killed by drop guards; `toolmesh bench` also arms
        // the kernel's parent-death signal.
        parent_death: None,
        quick: false,
        json: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => options.quick = true,
            "--toolmesh" | "--fixture" | "--json" => {
                let Some(value) = args.next() else {
                    eprintln!("{arg} needs a path");
                    return ExitCode::from(64);
                };
                match arg.as_str() {
                    "--json" => options.json = Some(value.into()),
                    "--fixture" => options.fixture_exe = value.into(),
                    _ => options.toolmesh_exe = value.into(),
                }
            }
            _ => {
                eprintln!(
                    "usage: bench [--toolmesh PATH] [--fixture PATH] [--quick] [--json PATH]"
                );
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

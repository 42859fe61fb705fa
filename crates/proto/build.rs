//! Compiles the repository's `proto/toolmesh/v1/*.proto` with protox (no
//! system `protoc`) and keeps the encoded descriptor set for gRPC reflection.

use prost::Message;
use std::{env, fs, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The contract lives at the repository's top, where teams in other
    // languages find it.
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let files = ["common", "registry", "dispatcher", "executor"]
        .map(|name| root.join(format!("toolmesh/v1/{name}.proto")));
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    let descriptors = protox::compile(&files, [&root])?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(
        out.join("toolmesh_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}

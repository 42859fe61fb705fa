//! Compiles the repository's `proto/toolmesh/v1/*.proto` (the contract) and
//! `proto/toolmesh/store/v1/*.proto` (the registry's stored records) with
//! protox (no system `protoc`), and keeps the contract's encoded descriptor
//! set for gRPC reflection.

use prost::Message;
use std::{env, fs, path::PathBuf};

/// The gRPC contract's package.
const CONTRACT_PACKAGE: &str = "toolmesh.v1";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The contract lives at the repository's top, where teams in other
    // languages find it.
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let files = [
        "v1/common",
        "v1/registry",
        "v1/dispatcher",
        "v1/executor",
        "store/v1/records",
    ]
    .map(|name| root.join(format!("toolmesh/{name}.proto")));
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    let descriptors = protox::compile(&files, [&root])?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    // Reflection serves the contract only: no service sends stored records.
    let mut contract = descriptors.clone();
    contract
        .file
        .retain(|file| file.package() == CONTRACT_PACKAGE);
    fs::write(
        out.join("toolmesh_descriptor.bin"),
        contract.encode_to_vec(),
    )?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    shared_listing_server(contract, &out)?;
    Ok(())
}

/// The Dispatcher service's server once more, answering ListTools with
/// `SharedListTools` (src/shared.rs: a rendered page shared by `Arc`,
/// encoded from where it lies) instead of a copy of it: every other type
/// is the contract's own, generated above. Written to `OUT_DIR/shared/`.
fn shared_listing_server(
    mut contract: prost_types::FileDescriptorSet,
    out: &std::path::Path,
) -> Result<(), Box<dyn std::error::Error>> {
    for file in &mut contract.file {
        file.service
            .retain(|service| service.name() == "Dispatcher");
    }
    let dir = out.join("shared");
    fs::create_dir_all(&dir)?;
    tonic_prost_build::configure()
        .build_client(false)
        .out_dir(&dir)
        .extern_path(".toolmesh.v1", "crate")
        .extern_path(
            ".toolmesh.v1.ListToolsResponse",
            "crate::shared::SharedListTools",
        )
        .compile_fds(contract)?;
    Ok(())
}

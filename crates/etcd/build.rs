//! Generates the etcd v3 client from the vendored subset of etcd's protos
//! with protox (no system `protoc`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/etcd/kv.proto",
        "proto/etcd/auth.proto",
        "proto/etcd/rpc.proto",
    ];
    for file in &files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(descriptors)?;
    Ok(())
}

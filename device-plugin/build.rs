// The kubelet device plugin API (proto/api.proto) and pod-resources API (proto/podresources.proto) as Rust
// types, clients and servers. Needs protoc (scripts/install-deps.sh installs it).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_prost_build::configure().compile_protos(&["proto/api.proto", "proto/podresources.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/api.proto");
    println!("cargo:rerun-if-changed=proto/podresources.proto");
    Ok(())
}

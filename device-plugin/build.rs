// The kubelet device plugin API (proto/api.proto) as Rust types, client and server. Needs protoc
// (scripts/install-deps.sh installs it).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_prost_build::configure().compile_protos(&["proto/api.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/api.proto");
    Ok(())
}

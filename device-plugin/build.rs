// The kubelet device plugin API (proto/api.proto), pod-resources API (proto/podresources.proto), DRA plugin API
// (proto/dra.proto) and plugin registration API (proto/pluginregistration.proto) as Rust types, clients and
// servers. Needs protoc (scripts/install-deps.sh installs it).
const PROTOS: [&str; 4] =
    ["proto/api.proto", "proto/podresources.proto", "proto/dra.proto", "proto/pluginregistration.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_prost_build::configure().compile_protos(&PROTOS, &["proto"])?;
    for p in PROTOS {
        println!("cargo:rerun-if-changed={p}");
    }
    Ok(())
}

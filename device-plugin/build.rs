// The kubelet device plugin API (proto/api.proto), pod-resources API (proto/podresources.proto), DRA plugin API
// (proto/dra.proto) and plugin registration API (proto/pluginregistration.proto) as Rust types, clients and
// servers; the NRI API (proto/nri/api.proto) as message types only (its ttrpc transport is nri_mux.rs). Needs
// protoc (scripts/install-deps.sh installs it).
const PROTOS: [&str; 4] =
    ["proto/api.proto", "proto/podresources.proto", "proto/dra.proto", "proto/pluginregistration.proto"];
const NRI_PROTO: &str = "proto/nri/api.proto";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tonic_prost_build::configure().compile_protos(&PROTOS, &["proto"])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .compile_protos(&[NRI_PROTO], &["proto/nri"])?;
    for p in PROTOS.iter().chain([&NRI_PROTO]) {
        println!("cargo:rerun-if-changed={p}");
    }
    Ok(())
}

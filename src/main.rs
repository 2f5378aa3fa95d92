use std::io::{Read, Write};

const USAGE: &str = "sriov-rdma: a CNI plugin (run by a container runtime with CNI_COMMAND set).\n\
usage: sriov-rdma doctor [--json] [--netns PATH]   readiness report of this host (or a pod's view)\n\
       sriov-rdma gc [--dry-run] [--json]        reclaim VFs whose pod namespace is gone without a DEL\n\
       sriov-rdma --version\n";

fn main() {
    if std::env::var_os("CNI_COMMAND").is_none() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        if args.first().map(String::as_str) == Some("doctor") {
            std::process::exit(sriov_rdma_cni::doctor::main(&args[1..]));
        }
        if args.first().map(String::as_str) == Some("gc") {
            std::process::exit(sriov_rdma_cni::flow::orphans::main(&args[1..]));
        }
        let arg = args.first().cloned();
        if matches!(arg.as_deref(), Some("--version") | Some("version")) {
            eprintln!(
                "sriov-rdma {} (CNI {})",
                env!("CARGO_PKG_VERSION"),
                sriov_rdma_cni::cni::config::SUPPORTED_VERSIONS.join(", ")
            );
            return;
        }
        eprint!("{USAGE}");
        std::process::exit(1);
    }
    let mut stdin = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut stdin) {
        eprintln!("sriov-rdma: reading the configuration from stdin: {e}");
    }
    let out = sriov_rdma_cni::flow::run(&stdin, |k| std::env::var(k).ok());
    let mut so = std::io::stdout().lock();
    let _ = so.write_all(out.stdout.as_bytes());
    let _ = so.flush();
    std::process::exit(if out.ok { 0 } else { 1 });
}

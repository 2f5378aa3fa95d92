use std::io::{Read, Write};

const USAGE: &str = "sriov-rdma: a CNI plugin (run by a container runtime with CNI_COMMAND set).\n\
usage: sriov-rdma doctor [--json] [--netns PATH] [--interval SECS] [--cpus LIST] [--bandwidth PEER]\n\
                         [--kubelet-dir DIR] [--config FILE [--device PCI]]\n\
                                                   readiness, link, bandwidth and resource report (or a pod's view)\n\
       sriov-rdma gc [--dry-run] [--json]        reclaim VFs whose pod namespace is gone without a DEL\n\
       sriov-rdma install [--cni-bin-dir DIR] [--conflist FILE [--cni-conf-dir DIR]] [--sleep]\n\
                                                   copy this binary into the node's CNI bin dir (installer image)\n\
       sriov-rdma --version\n";

fn main() {
    if std::env::var_os("CNI_COMMAND").is_none() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        match args.first().map(String::as_str) {
            Some("doctor") => std::process::exit(sriov_rdma_cni::doctor::main(&args[1..])),
            Some("gc") => std::process::exit(sriov_rdma_cni::flow::orphans::main(&args[1..])),
            Some("install") => std::process::exit(sriov_rdma_cni::install::main(&args[1..])),
            Some("--version") | Some("version") => {
                eprintln!("{}", sriov_rdma_cni::install::version_line());
                return;
            }
            _ => {}
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

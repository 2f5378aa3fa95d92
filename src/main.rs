use std::io::{Read, Write};

const USAGE: &str = "sriov-rdma: a CNI plugin (run by a container runtime with CNI_COMMAND set).\n\
usage: sriov-rdma doctor [--json] [--netns PATH]   readiness report of this host (or a pod's view)\n\
       sriov-rdma gc [--dry-run] [--json]        reclaim VFs whose pod namespace is gone without a DEL\n\
       sriov-rdma install [--cni-bin-dir DIR] [--conflist FILE [--cni-conf-dir DIR]] [--sleep]\n\
                                                   copy this binary into the node's CNI bin dir (installer image)\n\
       sriov-rdma device-plugin [--config FILE] [--dry-run] ...
                                                   offer VFs and their RDMA devices to the kubelet (rdma/hca)
       sriov-rdma --version\n";

fn main() {
    if std::env::var_os("CNI_COMMAND").is_none() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        match args.first().map(String::as_str) {
            Some("doctor") => std::process::exit(sriov_rdma_cni::doctor::main(&args[1..])),
            Some("gc") => std::process::exit(sriov_rdma_cni::flow::orphans::main(&args[1..])),
            Some("install") => std::process::exit(sriov_rdma_cni::install::main(&args[1..])),
            Some("device-plugin") => std::process::exit(device_plugin(&args[1..])),
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

/// The device plugin is a long-running daemon with an async runtime: it lives in its own binary next to this one
/// (sriov-rdma-device-plugin), so the CNI stays small and quick to start. This runs it in this process's place.
fn device_plugin(args: &[String]) -> i32 {
    use std::os::unix::process::CommandExt;
    const BIN: &str = "sriov-rdma-device-plugin";
    let bin = match std::env::current_exe() {
        Ok(me) => me.with_file_name(BIN),
        Err(e) => {
            eprintln!("sriov-rdma: finding this executable's directory to run {BIN}: {e}");
            return 1;
        }
    };
    let err = std::process::Command::new(&bin).args(args).exec();
    eprintln!("sriov-rdma: running {}: {err} (it ships beside sriov-rdma in the image)", bin.display());
    1
}

use std::os::unix::process::CommandExt;

const USAGE: &str = concat!(
    "usage: sriov-rdma doctor [--json] [--netns PATH] [--interval SECS] [--cpus LIST] [--bandwidth PEER]\n",
    "                         [--kubelet-dir DIR] [--config FILE [--device PCI]] [--device-plugin-config FILE]\n",
    "                                                   readiness, link, bandwidth and resource report (or a pod's view)\n",
    "       sriov-rdma gc [--dry-run] [--json]        reclaim VFs whose pod namespace is gone without a DEL\n",
    "       sriov-rdma install [--cni-bin-dir DIR] [--conflist FILE [--cni-conf-dir DIR]] [--sleep]\n",
    "                                                   copy this binary into the node's CNI bin dir (installer image)\n",
    "       sriov-rdma device-plugin [--config FILE] [--dry-run] ...\n",
    "                                                   offer VFs and their RDMA devices to the kubelet (rdma/hca)\n",
    "       sriov-rdma --version | --help\n",
    "Each command takes --help. Run by a container runtime with CNI_COMMAND set, sriov-rdma is the CNI plugin.\n",
);

/// Exit status of a bad command line.
const EXIT_USAGE: i32 = 2;

fn main() {
    if std::env::var_os("CNI_COMMAND").is_none() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let code = match args.first().map(String::as_str) {
            Some("doctor") => sriov_rdma_cni::doctor::main(&args[1..]),
            Some("gc") => sriov_rdma_cni::flow::orphans::main(&args[1..]),
            Some("install") => sriov_rdma_cni::install::main(&args[1..]),
            Some("device-plugin") => device_plugin(&args[1..]),
            Some("--version" | "version") => {
                println!("{}", sriov_rdma_cni::install::version_line());
                0
            }
            Some("--help" | "-h" | "help") => {
                print!("{USAGE}");
                0
            }
            Some(other) => {
                eprint!("sriov-rdma: unknown command {other:?}\n{USAGE}");
                EXIT_USAGE
            }
            None => {
                eprint!("{USAGE}");
                EXIT_USAGE
            }
        };
        std::process::exit(code);
    }
    std::process::exit(sriov_rdma_cni::flow::plugin_main());
}

/// The device plugin is a long-running daemon with an async runtime: it lives in its own binary beside this one
/// (sriov-rdma-device-plugin), so the CNI stays small and quick to start. This runs it in this process's place:
/// from this executable's directory when it was started by path (`/sriov-rdma device-plugin`), else from PATH.
fn device_plugin(args: &[String]) -> i32 {
    const BIN: &str = "sriov-rdma-device-plugin";
    let me = std::env::args().next().unwrap_or_default();
    let bin = match me.rfind('/') {
        Some(i) => format!("{}{BIN}", &me[..=i]),
        None => BIN.to_string(),
    };
    // Returns only when it failed. std's Command is in this binary anyway (install runs the copy it installed):
    // exec added 576 bytes to the release binary over an unsafe libc::execvp.
    let err = std::process::Command::new(&bin).args(args).exec();
    eprintln!("sriov-rdma: running {bin}: {err} (it ships beside sriov-rdma)");
    1
}

use std::io::{Read, Write};

const USAGE: &str = "sriov-rdma: a CNI plugin (run by a container runtime with CNI_COMMAND set).\n\
usage: sriov-rdma doctor [--json] [--netns PATH] [--interval SECS] [--cpus LIST] [--bandwidth PEER]\n\
                         [--kubelet-dir DIR] [--config FILE [--device PCI]]\n\
                                                   readiness, link, bandwidth and resource report (or a pod's view)\n\
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
    // execvp directly: std's Command would add its spawn machinery to the CNI. Arguments from the command line
    // hold no NUL byte, so each is its bytes plus a terminating one.
    let strings: Vec<Vec<u8>> = std::iter::once(&bin).chain(args).map(|a| [a.as_bytes(), b"\0"].concat()).collect();
    let mut argv: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr().cast()).collect();
    argv.push(std::ptr::null());
    // SAFETY: every pointer is to a NUL-terminated buffer alive until the call, and argv ends with NULL.
    unsafe { libc::execvp(argv[0], argv.as_ptr()) };
    let err = std::io::Error::last_os_error();
    eprintln!("sriov-rdma: running {bin}: {err} (it ships beside sriov-rdma)");
    1
}

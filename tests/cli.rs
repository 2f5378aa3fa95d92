//! The command line of `sriov-rdma` outside the CNI protocol (no CNI_COMMAND): `--version` on stdout with the
//! commit, `--help` of every subcommand on stdout with exit 0, a bad command line on stderr with exit 2 (usage
//! errors), the top-level usage with its indentation, and `device-plugin` handing over to the daemon binary beside
//! it in the same process. The daemon's own are in device-plugin/tests/kubelet.rs.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_sriov-rdma");

/// Runs `bin args` without CNI_COMMAND: (exit code, stdout, stderr).
fn run(bin: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(bin).args(args).env_remove("CNI_COMMAND").output().expect("running sriov-rdma");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The commit this tree is at, as the build stamps it.
fn head() -> String {
    Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

#[test]
fn version_goes_to_stdout_with_the_version_and_the_commit() {
    for arg in ["--version", "version"] {
        let (code, out, err) = run(Path::new(BIN), &[arg]);
        assert_eq!((code, err.as_str()), (Some(0), ""), "{arg}");
        let want = format!("sriov-rdma {} (commit {}; CNI ", env!("CARGO_PKG_VERSION"), head());
        assert!(out.starts_with(&want) && out.ends_with(")\n") && out.lines().count() == 1, "{arg}: {out:?}");
    }
}

#[test]
fn help_is_on_stdout_with_exit_0_and_a_bad_command_line_on_stderr_with_exit_2() {
    for cmd in [&[][..], &["doctor"], &["gc"], &["install"]] {
        let name = ["sriov-rdma"].iter().chain(cmd).copied().collect::<Vec<_>>().join(" ");
        for help in ["--help", "-h"] {
            let args: Vec<&str> = cmd.iter().copied().chain([help]).collect();
            let (code, out, err) = run(Path::new(BIN), &args);
            assert_eq!((code, err.as_str()), (Some(0), ""), "{name} {help}: {out}");
            assert!(out.starts_with("usage: ") && out.contains(&name), "{name} {help}: {out}");
        }
        let args: Vec<&str> = cmd.iter().copied().chain(["--bogus"]).collect();
        let (code, out, err) = run(Path::new(BIN), &args);
        assert_eq!((code, out.as_str()), (Some(2), ""), "{name} --bogus: {err}");
        assert!(err.starts_with(&format!("{name}: unknown")) && err.contains("\"--bogus\""), "{name}: {err}");
        assert!(err.contains("usage: "), "{name} --bogus shows the usage: {err}");
    }
    // No command at all is a usage error too.
    let (code, out, err) = run(Path::new(BIN), &[]);
    assert_eq!((code, out.as_str()), (Some(2), ""), "{err}");
    assert!(err.contains("usage: sriov-rdma doctor"), "{err}");
    // A value missing after a flag.
    let (code, _, err) = run(Path::new(BIN), &["doctor", "--interval"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--interval needs"), "{err}");
}

#[test]
fn the_top_level_usage_keeps_its_indentation() {
    let (_, out, _) = run(Path::new(BIN), &["--help"]);
    let lines: Vec<&str> = out.lines().collect();
    // Every command after the first is aligned under it ("usage: " is 7 columns) and each description starts in
    // one column further right.
    for cmd in ["gc", "install", "device-plugin", "--version"] {
        let prefix = format!("       sriov-rdma {cmd}");
        assert!(lines.iter().any(|l| l.starts_with(&prefix)), "no line starting {prefix:?}:\n{out}");
    }
    let described: Vec<&&str> = lines.iter().filter(|l| l.trim_start().starts_with("copy this binary")).collect();
    assert_eq!(described.len(), 1, "{out}");
    assert!(described[0].starts_with(&" ".repeat(20)), "a description line keeps its indentation:\n{out}");
}

#[test]
fn device_plugin_hands_over_to_the_daemon_beside_it_in_the_same_process() {
    let dir = std::env::temp_dir().join(format!("sriov-rdma-cli-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    // A stand-in daemon: says its PID and arguments, exits 7.
    let daemon = dir.join("sriov-rdma-device-plugin");
    fs::write(&daemon, "#!/bin/sh\necho \"$$ $*\"\nexit 7\n").unwrap();
    fs::set_permissions(&daemon, fs::Permissions::from_mode(0o755)).unwrap();
    let cni = dir.join("sriov-rdma");
    fs::copy(BIN, &cni).unwrap();
    let mut c = Command::new(&cni);
    c.args(["device-plugin", "--config", "a b.json", "--dry-run"])
        .env_remove("CNI_COMMAND")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // A file just written can be busy for an instant (ETXTBSY, for the spawn or for the handover's exec): its
    // write fd lingers in a child another test thread forked meanwhile, until that child execs. Bounded retries.
    let busy = |e: &std::io::Error| e.raw_os_error() == Some(libc::ETXTBSY);
    let (pid, out) = (0..100)
        .find_map(|_| {
            let r = c.spawn().and_then(|child| Ok((child.id(), child.wait_with_output()?)));
            match r {
                Err(e) if busy(&e) => None,
                Ok((_, o)) if String::from_utf8_lossy(&o.stderr).contains("Text file busy") => None,
                r => Some(r.expect("running the copied sriov-rdma")),
            }
            .or_else(|| {
                std::thread::sleep(std::time::Duration::from_millis(20));
                None
            })
        })
        .expect("the files stayed busy (ETXTBSY) for 2 s");
    assert_eq!(out.status.code(), Some(7), "the daemon's exit status");
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{pid} --config a b.json --dry-run\n"), "same PID");
    // Without the daemon beside it: said on stderr, exit 1 (nothing to run, not a usage error).
    fs::remove_file(&daemon).unwrap();
    let (code, out, err) = run(&cni, &["device-plugin"]);
    assert_eq!((code, out.as_str()), (Some(1), ""), "{err}");
    assert!(err.contains("sriov-rdma-device-plugin") && err.contains("No such file"), "{err}");
    fs::remove_dir_all(&dir).unwrap();
}

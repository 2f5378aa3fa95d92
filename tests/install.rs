//! The shipped artifacts: the release `sriov-rdma` is fully static and runs in an empty root; `sriov-rdma install`
//! puts `sriov-rdma-device-plugin` beside the plugin, version-checked; the installer image (Containerfile) run by
//! podman like the DaemonSet runs it installs both byte for byte, replaces a copy that is executing without
//! disturbing it, and stays up with `--sleep` until SIGTERM.
//!
//! They test target/release/sriov-rdma, which `make unit` builds first (`make release`); a missing or stale
//! one fails. Root, podman and runc are needed (`make deps`); SRIOV_RDMA_SKIP_ROOT_TESTS=1 skips instead.

mod common;
use common::*;
use serde::Deserialize;
use serde_json::Value;
use sriov_rdma_cni::cni::config::SUPPORTED_VERSIONS;
use sriov_rdma_cni::install::{device_plugin_version_line, version_line};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn newest(p: &Path) -> SystemTime {
    let m = fs::metadata(p).unwrap();
    if !m.is_dir() {
        return m.modified().unwrap();
    }
    fs::read_dir(p)
        .unwrap()
        .map(|e| e.unwrap().path())
        // The benchmark's sources are not in sriov-rdma: cargo does not relink it when only they change.
        .filter(|p| !p.ends_with("src/bin"))
        .map(|p| newest(&p))
        .max()
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// target/release/sriov-rdma, which the Makefile, the image and tests/vm use; it must be newer than
/// everything it is built from.
fn release_bin() -> PathBuf {
    let bin = Path::new(ROOT).join("target/release/sriov-rdma");
    let built = fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}: run `make release` (cargo build --release) first", bin.display()));
    for src in ["src", "Cargo.toml", "Cargo.lock", ".cargo/config.toml", "scripts/rustc-static-bins"] {
        let p = Path::new(ROOT).join(src);
        assert!(newest(&p) <= built, "{} is older than {}: run `make release` first", bin.display(), p.display());
    }
    bin
}

/// Whether an ELF file asks for a program interpreter (PT_INTERP) and how many shared libraries (DT_NEEDED).
fn elf_dynamic_deps(b: &[u8]) -> (bool, usize) {
    assert!(b.len() > 64 && &b[..4] == b"\x7fELF" && b[4] == 2 && b[5] == 1, "not a 64-bit little-endian ELF");
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap()) as usize;
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    let (mut interp, mut needed) = (false, 0);
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        match u32::from_le_bytes(b[ph..ph + 4].try_into().unwrap()) {
            3 => interp = true,
            2 => {
                let (off, size) = (u64_at(ph + 8), u64_at(ph + 32));
                for e in (off..off + size).step_by(16) {
                    match u64_at(e) {
                        0 => break,
                        1 => needed += 1,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    (interp, needed)
}

#[test]
fn the_release_binary_is_fully_static() {
    let bin = release_bin();
    // The checker itself: this test harness is an ordinary dynamic executable.
    let me = fs::read(std::env::current_exe().unwrap()).unwrap();
    let (interp, needed) = elf_dynamic_deps(&me);
    assert!(interp && needed > 0, "the ELF check sees the test harness's loader and libraries");

    assert_eq!(
        elf_dynamic_deps(&fs::read(&bin).unwrap()),
        (false, 0),
        "{}: no loader, no shared library",
        bin.display()
    );
    // glibc's ldd: "statically linked" for a static-pie (what crt-static gives), "not a dynamic executable"
    // for a non-PIE static binary; either way no library is listed.
    let out = Command::new("ldd").arg(&bin).output().expect("running ldd");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("statically linked") || said.contains("not a dynamic executable"), "ldd: {said}");
    assert!(!said.contains("=>") && !said.contains("ld-linux"), "ldd: {said}");
}

/// Whether `needle` occurs in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The test fixtures (kernel::sysfs::fake, the fake sysfs tree, behind the `fixtures` feature) are not in
/// what `cargo build --release` builds. The library is checked as well as the binary: LTO drops FakeTree's
/// unused code from sriov-rdma whether or not the module is compiled, so only the library's metadata shows
/// whether the module is out. Asks cargo which artifacts that command gives (up to date, after release_bin,
/// so nothing is rebuilt) rather than guessing: target/release/libsriov_rdma_cni.rlib is whichever build
/// ran last, and the benchmarks' build (--features fixtures) writes it too.
#[test]
fn the_release_build_has_no_test_fixtures() {
    let bin = release_bin();
    let out = Command::new(env!("CARGO"))
        .args(["build", "--release", "--message-format=json"])
        .current_dir(ROOT)
        .stderr(Stdio::inherit())
        .output()
        .expect("running cargo");
    assert!(out.status.success(), "cargo build --release failed");
    let (mut lib, mut exe) = (Vec::new(), None);
    for m in String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str::<Value>(l).unwrap()) {
        if m["reason"] != "compiler-artifact" || m["manifest_path"] != format!("{ROOT}/Cargo.toml") {
            continue;
        }
        assert_eq!(m["features"], serde_json::json!([]), "{}: built with features", m["target"]["name"]);
        match m["target"]["name"].as_str() {
            Some("sriov_rdma_cni") => {
                lib.extend(m["filenames"].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_string()))
            }
            Some("sriov-rdma") => exe = m["executable"].as_str().map(PathBuf::from),
            // build.rs: stamps the commit into --version; it runs at build time and ships nothing.
            Some("build-script-build") if m["target"]["kind"] == serde_json::json!(["custom-build"]) => {}
            other => panic!("cargo build --release built {other:?}: only the library and sriov-rdma"),
        }
    }
    assert_eq!(exe.as_deref(), Some(bin.as_path()), "cargo build --release gives {}", bin.display());
    assert!(lib.iter().any(|f| f.ends_with(".rlib")) && lib.iter().any(|f| f.ends_with(".rmeta")), "{lib:?}");
    for f in &lib {
        // A method only FakeTree has; its name is in the metadata of a library that has the module.
        assert!(!contains(&fs::read(f).unwrap(), b"set_vf_netdev"), "{f} has FakeTree (kernel::sysfs::fake)");
    }
    // The text FakeTree::new writes into a tree's fixture mark, a string only that code has.
    assert!(
        !contains(&fs::read(&bin).unwrap(), b"a test tree: no namespace-tagged view"),
        "{} has FakeTree's code",
        bin.display()
    );
}

#[test]
fn the_release_binary_runs_in_an_empty_root() {
    if !runnable("runs_in_an_empty_root", &[("root (chroot)", is_root())]) {
        return;
    }
    let bin = release_bin();
    let root = std::env::temp_dir().join(format!("sriov-rdma-chroot-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root).unwrap();
    fs::copy(&bin, root.join("sriov-rdma")).unwrap();
    // The copy's write fd can linger in a child another test thread forked meanwhile (until that child execs):
    // exec then fails with ETXTBSY, which chroot reports as 126 "Text file busy". Wait it out, a bounded time.
    let busy = (0..100).find(|_| {
        let o = Command::new("/usr/sbin/chroot").arg(&root).arg("/sriov-rdma").arg("--version").env_clear().output();
        let busy = o.is_ok_and(|o| String::from_utf8_lossy(&o.stderr).contains("Text file busy"));
        if busy {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        !busy
    });
    assert!(busy.is_some(), "the copied binary stayed busy (ETXTBSY) for 2 s");
    let run = |args: &[&str], env: &[(&str, &str)], stdin: &str| {
        let mut c = Command::new("/usr/sbin/chroot")
            .arg(&root)
            .arg("/sriov-rdma")
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running chroot");
        c.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        let o = c.wait_with_output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };

    let (code, out, err) = run(&["--version"], &[], "");
    assert_eq!((code, out.trim(), err.as_str()), (Some(0), version_line().as_str(), ""), "{err}");

    let (code, out, err) = run(&[], &[("CNI_COMMAND", "VERSION")], r#"{"cniVersion":"1.0.0"}"#);
    assert_eq!(code, Some(0), "{out} {err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("VERSION stdout is not JSON ({e}): {out:?}"));
    assert_eq!(v["cniVersion"], "1.0.0");
    assert_eq!(v["supportedVersions"], serde_json::json!(SUPPORTED_VERSIONS));

    // Nothing else there (no /proc): install says what it could not do, on stderr only, and fails.
    let (code, out, err) = run(&["install", "--cni-bin-dir", "/"], &[], "");
    assert_eq!((code, out.as_str()), (Some(1), ""), "{err}");
    assert!(err.contains("reading the running binary /proc/self/exe"), "{err}");
    let left: Vec<_> = fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["sriov-rdma"]);
    fs::remove_dir_all(&root).unwrap();
}

/// `sriov-rdma install` from the release build puts target/release/sriov-rdma-device-plugin beside the plugin (so
/// `sriov-rdma doctor` on the node finds it), byte for byte, 0755, by rename (a running old copy keeps its inode),
/// and refuses a device plugin of another build beside it. Needs no root: the dirs are this test's own.
#[test]
fn install_puts_the_device_plugin_beside_the_plugin() {
    let bin = release_bin();
    let dp = bin.with_file_name("sriov-rdma-device-plugin");
    let built =
        fs::metadata(&dp).and_then(|m| m.modified()).unwrap_or_else(|e| panic!("{}: {e}: make release", dp.display()));
    assert!(
        newest(&Path::new(ROOT).join("device-plugin")) <= built,
        "{} is older than device-plugin/: make release",
        dp.display()
    );
    // Under target/: hard links of the release binaries (no write fd of ours, so no ETXTBSY when they run).
    let dir = Path::new(ROOT).join(format!("target/it-install-dp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let (src, cni_bin) = (dir.join("src"), dir.join("opt-cni-bin"));
    fs::create_dir_all(&src).unwrap();
    fs::create_dir_all(&cni_bin).unwrap();
    fs::hard_link(&bin, src.join("sriov-rdma")).unwrap();
    fs::hard_link(&dp, src.join("sriov-rdma-device-plugin")).unwrap();
    let install = || {
        let o = Command::new(src.join("sriov-rdma"))
            .args(["install", "--cni-bin-dir"])
            .arg(&cni_bin)
            .env_clear()
            .output()
            .expect("running sriov-rdma install");
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let target = cni_bin.join("sriov-rdma-device-plugin");
    let (code, out, err) = install();
    assert_eq!((code, out.as_str()), (Some(0), ""), "{err}");
    assert!(fs::read(&target).unwrap() == fs::read(&dp).unwrap(), "the installed device plugin is the release build");
    assert_eq!(fs::metadata(&target).unwrap().permissions().mode() & 0o7777, 0o755);
    assert!(err.contains(&format!("{} runs: {}", target.display(), device_plugin_version_line())), "{err}");
    // What the installed copy says is what the installer expects of this build.
    let v = Command::new(&target).arg("--version").env_clear().output().unwrap();
    assert_eq!(String::from_utf8_lossy(&v.stdout).trim(), device_plugin_version_line());

    // An older copy open on the node: replaced by rename, the open one keeps its content.
    let mut old = fs::read(&dp).unwrap();
    old.extend_from_slice(b"\0an older build\0");
    fs::write(cni_bin.join(".old"), &old).unwrap();
    fs::set_permissions(cni_bin.join(".old"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::rename(cni_bin.join(".old"), &target).unwrap();
    let held = fs::File::open(&target).unwrap();
    let (code, _, err) = install();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains(&format!("installed {}", target.display())), "{err}");
    assert!(fs::read(&target).unwrap() == fs::read(&dp).unwrap());
    assert_ne!(held.metadata().unwrap().ino(), fs::metadata(&target).unwrap().ino(), "a new inode");
    drop(held);

    // A device plugin of another build beside the plugin: installed, then refused by its --version (exit 1).
    fs::remove_file(src.join("sriov-rdma-device-plugin")).unwrap();
    fs::write(src.join(".dp"), "#!/bin/sh\necho 'sriov-rdma-device-plugin 0.0.1 (commit 0000000)'\n").unwrap();
    fs::set_permissions(src.join(".dp"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::rename(src.join(".dp"), src.join("sriov-rdma-device-plugin")).unwrap();
    let (code, out, err) = install();
    assert_eq!((code, out.as_str()), (Some(1), ""), "{err}");
    assert!(err.contains("says \"sriov-rdma-device-plugin 0.0.1 (commit 0000000)\""), "{err}");
    fs::remove_dir_all(&dir).unwrap();
}

/// Reads a child's stderr on a thread; lines arrive on the channel.
fn lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for a line containing `what`; returns every line seen up to it.
fn wait_for(rx: &mpsc::Receiver<String>, what: &str, secs: u64) -> Vec<String> {
    let end = Instant::now() + Duration::from_secs(secs);
    let mut seen = Vec::new();
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => {
                let done = l.contains(what);
                seen.push(l);
                if done {
                    return seen;
                }
            }
            Err(_) => panic!("no {what:?} within {secs} s; stderr so far: {seen:#?}"),
        }
    }
}

struct Cleanup {
    dir: PathBuf,
    pod: Podman,
    image: String,
    container: String,
    children: Vec<Child>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = self.pod.run(&["rm", "-f", "-t", "0", &self.container]);
        let _ = self.pod.run(&["rmi", "-f", &self.image]);
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The image `make image` builds, from the same Containerfile and context, offline (FROM scratch), tagged `image`.
fn build_image(pod: &Podman, image: &str) {
    let out = pod
        .cmd()
        .current_dir(ROOT)
        .args(["build", "-q", "-f", "Containerfile", "--build-arg"])
        .arg(format!("VERSION={}", env!("CARGO_PKG_VERSION")))
        .args(["-t", image, "."])
        .output()
        .expect("running podman build");
    assert!(out.status.success(), "podman build: {}", String::from_utf8_lossy(&out.stderr));
}

/// `podman run` as the DaemonSet's securityContext says: read-only root, no capabilities, no privilege escalation.
const RUN_AS_THE_DAEMONSET: [&str; 8] =
    ["run", "--network", "none", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"];

/// The installer's command, as the DaemonSet's init container gives it.
fn daemonset_command() -> Vec<String> {
    let text = fs::read_to_string(Path::new(ROOT).join("deploy/sriov-rdma.yaml")).unwrap();
    let v = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .find(|v| v["kind"] == "DaemonSet")
        .expect("the DaemonSet in deploy/sriov-rdma.yaml");
    let c = &v["spec"]["template"]["spec"]["initContainers"][0];
    c["command"]
        .as_array()
        .unwrap()
        .iter()
        .chain(c["args"].as_array().into_iter().flatten())
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// The node policy of the ConfigMap deploy/sriov-rdma-policy.yaml.
fn shipped_policy() -> String {
    let text = fs::read_to_string(Path::new(ROOT).join("deploy/sriov-rdma-policy.yaml")).unwrap();
    let v = Value::deserialize(serde_yaml_ng::Deserializer::from_str(&text)).unwrap();
    v["data"]["policy.json"].as_str().unwrap().to_string()
}

#[test]
fn the_image_installs_the_binary_and_replaces_a_running_one() {
    if !runnable("image_installs", &[("root", is_root()), ("podman and runc", Podman::available())]) {
        return;
    }
    let bin = release_bin();
    let want = fs::read(&bin).unwrap();
    let dir = std::env::temp_dir().join(format!("sriov-rdma-it-image-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let host_bin = dir.join("opt-cni-bin");
    let other = dir.join("other-bin");
    for d in [&host_bin, &other] {
        fs::create_dir_all(d).unwrap();
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let pod = Podman::new(&dir, &[], &dir.join("net.d"));
    let mut guard = Cleanup {
        dir: dir.clone(),
        pod: pod.clone(),
        image: format!("localhost/sriov-rdma-it:install-{}", std::process::id()),
        container: format!("sriov-rdma-it-install-{}", std::process::id()),
        children: Vec::new(),
    };
    let image = guard.image.clone();

    build_image(&pod, &image);
    let mount = format!("{}:/host/opt/cni/bin", host_bin.display());
    let base = RUN_AS_THE_DAEMONSET;
    let install = |what: &str| {
        let out =
            pod.cmd().args(base).args(["--rm", "--user", "0", "-v", &mount, &image]).output().expect("podman run");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{what}: {err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{what}: nothing on stdout");
        err
    };
    let target = host_bin.join("sriov-rdma");
    let names = || {
        let mut v: Vec<String> =
            fs::read_dir(&host_bin).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    };

    // 1. An empty CNI bin dir gets the binary and the device plugin's, byte for byte, 0755, and no temp file is left.
    let err = install("first install");
    assert!(err.contains(&format!("installed /host/opt/cni/bin/sriov-rdma ({} bytes)", want.len())), "{err}");
    let dp = host_bin.join("sriov-rdma-device-plugin");
    assert!(fs::read(&dp).unwrap() == fs::read(release_bin().with_file_name("sriov-rdma-device-plugin")).unwrap());
    assert_eq!(fs::metadata(&dp).unwrap().permissions().mode() & 0o7777, 0o755);
    assert!(err.contains(&format!("sriov-rdma-device-plugin runs: {}", device_plugin_version_line())), "{err}");
    assert!(err.contains(&format!("/host/opt/cni/bin/sriov-rdma runs: {}", version_line())), "{err}");
    assert!(fs::read(&target).unwrap() == want, "the installed binary is target/release/sriov-rdma byte for byte");
    assert_eq!(fs::metadata(&target).unwrap().permissions().mode() & 0o7777, 0o755);
    assert_eq!(names(), ["sriov-rdma", "sriov-rdma-device-plugin"]);

    // 2. Again: the same content is left as it is.
    let ino = fs::metadata(&target).unwrap().ino();
    let err = install("second install");
    assert!(err.contains("is already this binary"), "{err}");
    assert_eq!(fs::metadata(&target).unwrap().ino(), ino);

    // 3. An older build is on the node and running (its own `install --sleep`): the new install must rename
    //    over the executing file, and the running process must go on with its own binary.
    let mut old = want.clone();
    old.extend_from_slice(b"\0an older build\0");
    fs::write(host_bin.join(".old"), &old).unwrap();
    fs::set_permissions(host_bin.join(".old"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::rename(host_bin.join(".old"), &target).unwrap();
    let mut running = Command::new(&target)
        .args(["install", "--cni-bin-dir"])
        .arg(&other)
        .arg("--sleep")
        .env_clear()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the installed binary");
    let pid = running.id();
    let rx = lines(&mut running);
    guard.children.push(running);
    wait_for(&rx, "staying up until SIGTERM", 20);
    // What a plain `cp` would run into.
    let e = fs::OpenOptions::new().write(true).open(&target).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ETXTBSY), "{e}");

    let err = install("install over a running binary");
    assert!(err.contains("installed /host/opt/cni/bin/sriov-rdma"), "{err}");
    assert!(fs::read(&target).unwrap() == want, "the new binary is in place");
    assert_eq!(names(), ["sriov-rdma", "sriov-rdma-device-plugin"]);
    let running = guard.children.last_mut().unwrap();
    assert!(running.try_wait().unwrap().is_none(), "the running old binary is still running");
    let exe = fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert!(exe.to_string_lossy().ends_with(" (deleted)"), "it runs the replaced inode: {}", exe.display());
    assert!(fs::read(format!("/proc/{pid}/exe")).unwrap() == old, "and that inode still holds the old build");
    assert!(fs::read(other.join("sriov-rdma")).unwrap() == old);
    // SIGTERM ends `--sleep` with status 0.
    assert!(Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().success());
    let status = running.wait().unwrap();
    wait_for(&rx, "SIGTERM: exiting", 10);
    assert_eq!(status.code(), Some(0), "{status}");

    // 4. The DaemonSet's init container (`install`) installs (here: finds the same binary) and the node policy of
    // the ConfigMap deploy/ ships into the host's /etc/sriov-rdma, and exits 0, so the device plugin starts after it.
    let cmd = daemonset_command();
    let entrypoint = serde_json::to_string(&cmd).unwrap();
    let (policy_cm, host_policy) = (dir.join("policy-configmap"), dir.join("etc-sriov-rdma"));
    for d in [&policy_cm, &host_policy] {
        fs::create_dir_all(d).unwrap();
    }
    let policy = shipped_policy();
    fs::write(policy_cm.join("policy.json"), &policy).unwrap();
    let policy_mounts = [
        "-v".to_string(),
        format!("{}:/etc/sriov-rdma-policy:ro", policy_cm.display()),
        "-v".to_string(),
        format!("{}:/host/etc/sriov-rdma", host_policy.display()),
    ];
    let out = pod
        .cmd()
        .args(base)
        .args(["--rm", "--name", &guard.container, "--user", "0", "-v", &mount])
        .args(&policy_mounts)
        .args(["--entrypoint", &entrypoint, &image])
        .output()
        .expect("podman run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "the init container exits 0: {err}");
    assert!(err.contains("is already this binary"), "{err}");
    assert!(err.contains("installed /host/etc/sriov-rdma/policy.json"), "{err}");
    assert_eq!(fs::read_to_string(host_policy.join("policy.json")).unwrap(), policy, "the ConfigMap's policy");
    assert_eq!(fs::metadata(host_policy.join("policy.json")).unwrap().permissions().mode() & 0o7777, 0o644);
    assert!(fs::read(&target).unwrap() == want);
}

/// `install --sleep` as a container's main process, PID 1, which the kernel spares every signal it has no handler
/// for: `podman stop` sends SIGTERM and must end it with status 0, not wait out its grace time and SIGKILL it.
#[test]
fn the_sleeping_installer_stops_on_podman_stop_with_status_0() {
    if !runnable("sleeping_installer", &[("root", is_root()), ("podman and runc", Podman::available())]) {
        return;
    }
    release_bin();
    let dir = std::env::temp_dir().join(format!("sriov-rdma-it-sleep-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let host_bin = dir.join("opt-cni-bin");
    fs::create_dir_all(&host_bin).unwrap();
    let pod = Podman::new(&dir, &[], &dir.join("net.d"));
    let guard = Cleanup {
        dir: dir.clone(),
        pod: pod.clone(),
        image: format!("localhost/sriov-rdma-it:sleep-{}", std::process::id()),
        container: format!("sriov-rdma-it-sleep-{}", std::process::id()),
        children: Vec::new(),
    };
    build_image(&pod, &guard.image);
    let mount = format!("{}:/host/opt/cni/bin", host_bin.display());
    let out = pod
        .cmd()
        .args(RUN_AS_THE_DAEMONSET)
        .args(["-d", "--name", &guard.container, "--user", "0", "-v", &mount, &guard.image])
        .args(["--cni-bin-dir", "/host/opt/cni/bin", "--sleep"])
        .output()
        .expect("podman run -d");
    assert!(out.status.success(), "podman run: {}", String::from_utf8_lossy(&out.stderr));
    let logs = || {
        let o = pod.run(&["logs", &guard.container]);
        format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
    };
    let up = Instant::now() + Duration::from_secs(20);
    while !logs().contains("staying up until SIGTERM") {
        assert!(Instant::now() < up, "the installer did not come up within 20 s: {}", logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid1 = pod.run(&["inspect", "--format", "{{.State.Pid}}", &guard.container]);
    let pid1 = String::from_utf8_lossy(&pid1.stdout).trim().to_string();
    let ns_pid = fs::read_to_string(format!("/proc/{pid1}/status")).unwrap_or_default();
    assert!(
        ns_pid.lines().any(|l| l.starts_with("NSpid:") && l.ends_with("\t1")),
        "it is the container's PID 1: {ns_pid}"
    );

    let grace = 10;
    let asked = Instant::now();
    let out = pod.run(&["stop", "-t", &grace.to_string(), &guard.container]);
    let took = asked.elapsed();
    assert!(out.status.success(), "podman stop: {}", String::from_utf8_lossy(&out.stderr));
    let code = pod.run(&["inspect", "--format", "{{.State.ExitCode}}", &guard.container]);
    let code = String::from_utf8_lossy(&code.stdout).trim().to_string();
    assert_eq!(code, "0", "exit status after podman stop (137: SIGKILLed after the grace time); logs: {}", logs());
    assert!(took < Duration::from_secs(grace / 2), "SIGTERM ended it, not the grace time: {took:?}");
    assert!(logs().contains("SIGTERM: exiting"), "{}", logs());
}

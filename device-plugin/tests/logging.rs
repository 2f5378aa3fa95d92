//! The daemon's logging: one line per message on stderr, as text or as JSON objects, at the level asked for;
//! a bad level or format is a command-line error naming the flag.

mod common;

use common::*;
use std::time::{Duration, Instant};

/// Starts the plugin with `extra`, waits for its registration and a moment of work, and returns its stderr.
async fn log_of(name: &str, extra: &[&str]) -> String {
    let node = Node::new(name);
    let mut kubelet = Kubelet::start(&node.kubelet_dir());
    let conf = node.config(r#"{"resources":[{"name":"rdma/hca"}]}"#);
    let mut args = vec!["--config", conf.to_str().unwrap()];
    args.extend_from_slice(extra);
    let plugin = node.start(&args);
    kubelet.next_registration(Duration::from_secs(10)).await;
    // The registration's own log line comes right after the kubelet answered.
    let end = Instant::now() + Duration::from_secs(5);
    while !plugin.log().contains("registered") && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    plugin.log()
}

#[tokio::test]
async fn json_format_writes_one_object_per_line_with_level_and_message() {
    let log = log_of("logjson", &["--log-format", "json"]).await;
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "no log at all");
    for l in &lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v["timestamp"].is_string() && v["level"].is_string(), "{l}");
        assert!(v["fields"]["message"].is_string(), "{l}");
    }
    assert!(
        lines.iter().any(|l| l.contains("\"level\":\"INFO\"") && l.contains("registered")),
        "the registration at INFO:\n{log}"
    );
}

#[tokio::test]
async fn the_level_drops_what_is_below_it_and_text_is_the_default() {
    let info = log_of("logtext", &[]).await;
    assert!(info.lines().any(|l| l.contains(" INFO ") && l.contains("registered")), "text, INFO shown:\n{info}");
    assert!(!info.lines().any(|l| l.trim_start().starts_with('{')), "text by default:\n{info}");
    let warn = log_of("logwarn", &["--log-level", "warning"]).await;
    assert!(!warn.contains(" INFO ") && !warn.contains("registered"), "nothing below warning:\n{warn}");
}

#[test]
fn a_bad_level_or_format_names_the_flag_and_exits_2() {
    let node = Node::new("logbad");
    for (args, says) in [
        (&["--log-format", "yaml"][..], "--log-format: \"yaml\" is not text or json"),
        (&["--log-level", "loud"], "--log-level: \"loud\" is not error, warning, info or debug"),
    ] {
        let o = node.command(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let o = node.command(&[]).env("SRIOV_RDMA_LOG_FORMAT", "xml").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("SRIOV_RDMA_LOG_FORMAT: \"xml\""));
}

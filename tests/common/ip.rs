//! Commands of the test beds on real network namespaces: run one, run one that must succeed, read a link with
//! `ip -j`. Included by tests/common/mod.rs and by the device plugin's root tests (`#[path]`).
#![allow(dead_code)]

use serde_json::Value;
use std::process::{Command, Output};

pub fn sh(args: &[&str]) -> Output {
    let out = Command::new(args[0]).args(&args[1..]).output().expect("running a command of the test bed");
    out
}

pub fn must(args: &[&str]) -> String {
    let out = sh(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ip -j link show` of one device, in the host or a namespace; `None` if it does not exist.
pub fn link(ns: Option<&str>, name: &str) -> Option<Value> {
    let mut args = vec!["ip"];
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    args.extend(["-j", "link", "show", "dev", name]);
    let out = sh(&args);
    if !out.status.success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v.as_array()?.first().cloned()
}

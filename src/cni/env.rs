//! The CNI_* environment of one invocation, validated as the spec says.

use super::error::{CniError, CniResult};
use std::collections::HashMap;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Gc,
    Status,
    Version,
}

impl Command {
    pub fn parse(s: &str) -> CniResult<Self> {
        Ok(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "GC" => Command::Gc,
            "STATUS" => Command::Status,
            "VERSION" => Command::Version,
            other => {
                return Err(CniError::env(format!(
                    "CNI_COMMAND {other:?} is not one of ADD, DEL, CHECK, GC, STATUS, VERSION"
                )))
            }
        })
    }
}

/// The validated environment. Fields a command does not need may be empty.
#[derive(Debug, Clone)]
pub struct CniEnv {
    pub command: Command,
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    pub args: HashMap<String, String>,
    pub path: Vec<PathBuf>,
}

impl CniEnv {
    /// CNI_ARGS as `K=V;K=V`, in key order.
    pub fn args_string(&self) -> String {
        let mut kv: Vec<_> = self.args.iter().map(|(k, v)| format!("{k}={v}")).collect();
        kv.sort();
        kv.join(";")
    }
}

/// Reads a variable through `get`, so tests need not touch the process environment.
pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> CniResult<CniEnv> {
    let command = match get("CNI_COMMAND") {
        Some(c) => Command::parse(&c)?,
        None => return Err(CniError::env("CNI_COMMAND is not set")),
    };
    let var = |k: &str| get(k).unwrap_or_default();
    let env = CniEnv {
        command,
        container_id: var("CNI_CONTAINERID"),
        netns: var("CNI_NETNS"),
        ifname: var("CNI_IFNAME"),
        args: parse_args(&var("CNI_ARGS"))?,
        path: var("CNI_PATH").split(':').filter(|p| !p.is_empty()).map(PathBuf::from).collect(),
    };
    let per_attachment = matches!(command, Command::Add | Command::Del | Command::Check);
    if per_attachment {
        validate_container_id(&env.container_id)?;
        validate_ifname(&env.ifname)?;
    }
    if matches!(command, Command::Add | Command::Check) && env.netns.is_empty() {
        return Err(CniError::env("CNI_NETNS is not set"));
    }
    Ok(env)
}

/// `K=V;K=V`; an entry without `=` is an error the spec calls out.
pub fn parse_args(s: &str) -> CniResult<HashMap<String, String>> {
    let mut out = HashMap::new();
    for pair in s.split(';').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                out.insert(k.to_string(), v.to_string());
            }
            _ => return Err(CniError::env(format!("CNI_ARGS entry {pair:?} is not KEY=VALUE"))),
        }
    }
    Ok(out)
}

/// The spec's pattern: `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`.
pub fn validate_container_id(id: &str) -> CniResult<()> {
    let mut chars = id.chars();
    let ok = match chars.next() {
        Some(c) if c.is_ascii_alphanumeric() => {
            chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-')
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else if id.is_empty() {
        Err(CniError::env("CNI_CONTAINERID is not set"))
    } else {
        Err(CniError::env(format!(
            "CNI_CONTAINERID {id:?} must start with a letter or digit and contain only letters, digits, '_', '.', '-'"
        )))
    }
}

/// A Linux interface name: 1–15 bytes, no '/', no whitespace, not '.' or '..', and no '%' (the kernel would
/// take `net%d` as a pattern and pick another name).
pub fn validate_ifname(name: &str) -> CniResult<()> {
    let why = if name.is_empty() {
        "is not set"
    } else if name.len() > 15 {
        "is longer than 15 bytes"
    } else if name == "." || name == ".." {
        "may not be '.' or '..'"
    } else if name.contains('/') || name.contains(':') || name.chars().any(char::is_whitespace) {
        "may not contain '/', ':' or whitespace"
    } else if name.contains('%') {
        "may not contain '%' (the kernel treats it as a name pattern)"
    } else {
        return Ok(());
    };
    Err(CniError::env(format!("CNI_IFNAME {name:?} {why}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cni::error::Code;

    fn env(vars: &[(&str, &str)]) -> CniResult<CniEnv> {
        let m: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        from_vars(|k| m.get(k).cloned())
    }

    const OK: &[(&str, &str)] = &[
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "abc-1.2_3"),
        ("CNI_NETNS", "/var/run/netns/x"),
        ("CNI_IFNAME", "net1"),
        ("CNI_PATH", "/opt/cni/bin:/usr/lib/cni"),
        ("CNI_ARGS", "IgnoreUnknown=1;deviceID=0000:3b:02.1"),
    ];

    fn with(k: &str, v: &str) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = OK.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        out.retain(|(a, _)| a != k);
        out.push((k.to_string(), v.to_string()));
        out
    }

    fn env_owned(v: Vec<(String, String)>) -> CniResult<CniEnv> {
        let m: HashMap<String, String> = v.into_iter().collect();
        from_vars(|k| m.get(k).cloned())
    }

    #[test]
    fn good_env_parses() {
        let e = env(OK).unwrap();
        assert_eq!(e.command, Command::Add);
        assert_eq!(e.path.len(), 2);
        assert_eq!(e.args["deviceID"], "0000:3b:02.1");
    }

    #[test]
    fn bad_values_name_the_variable_with_code_4() {
        for (k, v, needle) in [
            ("CNI_COMMAND", "FOO", "CNI_COMMAND"),
            ("CNI_CONTAINERID", "-abc", "CNI_CONTAINERID"),
            ("CNI_CONTAINERID", "a/b", "CNI_CONTAINERID"),
            ("CNI_CONTAINERID", "", "CNI_CONTAINERID"),
            ("CNI_IFNAME", "a-very-long-name0", "CNI_IFNAME"),
            ("CNI_IFNAME", "a/b", "CNI_IFNAME"),
            ("CNI_IFNAME", "..", "CNI_IFNAME"),
            ("CNI_IFNAME", "net%d", "CNI_IFNAME"),
            ("CNI_IFNAME", "%s", "CNI_IFNAME"),
            ("CNI_IFNAME", "", "CNI_IFNAME"),
            ("CNI_NETNS", "", "CNI_NETNS"),
            ("CNI_ARGS", "novalue", "CNI_ARGS"),
        ] {
            let err = env_owned(with(k, v)).unwrap_err();
            assert_eq!(err.code, Code::InvalidEnv, "{k}={v}");
            assert!(err.msg.contains(needle), "{k}={v}: {}", err.msg);
        }
    }

    #[test]
    fn missing_command_is_code_4() {
        let err = env(&[]).unwrap_err();
        assert_eq!(err.code, Code::InvalidEnv);
        assert!(err.msg.contains("CNI_COMMAND"));
    }

    #[test]
    fn del_without_netns_is_fine_gc_needs_no_container() {
        let mut v = with("CNI_COMMAND", "DEL");
        v.retain(|(k, _)| k != "CNI_NETNS");
        assert!(env_owned(v).is_ok());
        assert!(env(&[("CNI_COMMAND", "GC")]).is_ok());
        assert!(env(&[("CNI_COMMAND", "VERSION")]).is_ok());
    }
}

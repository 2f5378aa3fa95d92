//! CNI errors: a code from the spec, a message that says what was being done, and details.

use serde::Serialize;
use std::fmt;

/// Well-known error codes from the CNI specification (plus the ones STATUS uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Code {
    IncompatibleVersion = 1,
    UnsupportedField = 2,
    ContainerUnknown = 3,
    InvalidEnv = 4,
    Io = 5,
    Decode = 6,
    InvalidConfig = 7,
    TryAgainLater = 11,
    NotAvailable = 50,
    /// STATUS: not available, and existing attachments may have limited connectivity (spec 1.1.0).
    LimitedConnectivity = 51,
}

#[derive(Debug, Clone)]
pub struct CniError {
    pub code: Code,
    pub msg: String,
    pub details: String,
    /// The errno of the system call it came from, kept through every context added on top (the caller can still
    /// tell ENOENT from EACCES); reported in `details` when nothing else is.
    pub errno: Option<i32>,
}

impl CniError {
    pub fn new(code: Code, msg: impl Into<String>) -> Self {
        CniError { code, msg: msg.into(), details: String::new(), errno: None }
    }

    /// An I/O error: what was being done, the error (with the kernel's extended-ack words, if any) and its errno.
    pub fn from_io(what: impl fmt::Display, e: &std::io::Error) -> Self {
        CniError { errno: crate::model::errno(e), ..Self::io(format!("{what}: {e}")) }
    }

    /// Appends words to the message.
    pub fn suffix(mut self, more: &str) -> Self {
        self.msg.push_str(more);
        self
    }

    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// Prefixes the message with what was being done when it happened.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.msg = format!("{what}: {}", self.msg);
        self
    }

    pub fn config(msg: impl Into<String>) -> Self {
        Self::new(Code::InvalidConfig, msg)
    }

    pub fn env(msg: impl Into<String>) -> Self {
        Self::new(Code::InvalidEnv, msg)
    }

    pub fn io(msg: impl Into<String>) -> Self {
        Self::new(Code::Io, msg)
    }

    /// The JSON object the spec wants on stdout.
    pub fn to_json(&self, cni_version: &str) -> String {
        #[derive(Serialize)]
        struct Out<'a> {
            #[serde(rename = "cniVersion")]
            cni_version: &'a str,
            code: u32,
            msg: &'a str,
            #[serde(skip_serializing_if = "str::is_empty")]
            details: &'a str,
        }
        let errno = match (self.details.is_empty(), self.errno) {
            (true, Some(n)) => format!("errno {n}"),
            _ => String::new(),
        };
        let details = if errno.is_empty() { &self.details } else { &errno };
        let out = Out { cni_version, code: self.code as u32, msg: &self.msg, details };
        serde_json::to_string(&out).unwrap_or_else(|_| {
            format!("{{\"cniVersion\":\"{cni_version}\",\"code\":{},\"msg\":\"error\"}}", self.code as u32)
        })
    }
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.msg)?;
        if !self.details.is_empty() {
            write!(f, " ({})", self.details)?;
        }
        Ok(())
    }
}

impl std::error::Error for CniError {}

pub type CniResult<T> = Result<T, CniError>;

/// Turns an `io::Error` into a CNI I/O error that says what was being done.
pub trait IoContext<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> CniResult<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> CniResult<T> {
        self.map_err(|e| CniError::from_io(what(), &e))
    }
}

/// What a teardown (DEL, a rollback, GC) collected: it keeps going past each failure and reports all of them
/// under the most specific code.
#[derive(Debug, Default)]
pub struct Failures(Vec<CniError>);

impl Failures {
    pub fn push(&mut self, e: CniError) {
        crate::debug!("teardown: {e}");
        self.0.push(e);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The most specific code: the first that is not the generic I/O code 5 (an IPAM plugin's own, a busy
    /// lock's 11), else 5.
    pub fn code(&self) -> Code {
        self.0.iter().map(|e| e.code).find(|c| *c != Code::Io).unwrap_or(Code::Io)
    }

    /// One error: `what` and every failure in the message, each with its code in `details`.
    pub fn into_error(self, what: impl fmt::Display) -> Option<CniError> {
        let first = self.0.first()?;
        let code = self.code();
        let errno = first.errno;
        let all: Vec<String> = self.0.iter().map(|e| e.to_string()).collect();
        let details: Vec<String> = self
            .0
            .iter()
            .map(|e| match e.errno {
                Some(n) => format!("code {} errno {n}: {}", e.code as u32, e.msg),
                None => format!("code {}: {}", e.code as u32, e.msg),
            })
            .collect();
        Some(CniError { code, msg: format!("{what}: {}", all.join("; ")), details: details.join("; "), errno })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_json_has_code_msg_and_details() {
        let e = CniError::config("invalid vlan 5000").with_details("key vlan");
        let v: serde_json::Value = serde_json::from_str(&e.to_json("1.0.0")).unwrap();
        assert_eq!(v["code"], 7);
        assert_eq!(v["msg"], "invalid vlan 5000");
        assert_eq!(v["details"], "key vlan");
        assert_eq!(v["cniVersion"], "1.0.0");
    }

    #[test]
    fn io_context_keeps_the_errno_and_reports_it() {
        let r: std::io::Result<()> = Err(std::io::Error::from_raw_os_error(libc::ENOENT));
        let e = r.ctx(|| "opening /var/run/netns/x".to_string()).unwrap_err();
        assert_eq!(e.errno, Some(libc::ENOENT));
        assert!(e.msg.starts_with("opening /var/run/netns/x: "), "{}", e.msg);
        let e = e.context("DEL c1/net1");
        assert_eq!(e.errno, Some(libc::ENOENT), "context keeps the cause");
        let v: serde_json::Value = serde_json::from_str(&e.to_json("1.1.0")).unwrap();
        assert_eq!(v["details"], format!("errno {}", libc::ENOENT));
        // The kernel's own words come with their errno.
        let k = std::io::Error::other(crate::model::KernelError { errno: libc::ERANGE, ext_ack: "MTU too big".into() });
        let e = CniError::from_io("setting the MTU of net1", &k);
        assert_eq!(e.errno, Some(libc::ERANGE));
        assert!(e.msg.contains("MTU too big"), "{}", e.msg);
    }

    #[test]
    fn teardown_failures_keep_the_most_specific_code_and_every_error() {
        let mut f = Failures::default();
        assert!(f.is_empty());
        f.push(CniError::io("moving VF back: EBUSY"));
        f.push(CniError::new(Code::TryAgainLater, "VF locked"));
        f.push(CniError::new(Code::InvalidConfig, "ipam: bad range"));
        assert_eq!(f.code(), Code::TryAgainLater);
        let e = f.into_error("releasing VF 0000:3b:02.1").unwrap();
        assert_eq!(e.code, Code::TryAgainLater);
        assert_eq!(e.msg, "releasing VF 0000:3b:02.1: moving VF back: EBUSY; VF locked; ipam: bad range");
        assert!(e.details.contains("code 5: moving VF back") && e.details.contains("code 7: ipam"), "{}", e.details);
        let mut only_io = Failures::default();
        only_io.push(CniError::io("a"));
        assert_eq!(only_io.code(), Code::Io);
        assert!(Failures::default().into_error("x").is_none());
    }

    #[test]
    fn context_prefixes_the_message() {
        let e = CniError::io("EBUSY").context("moving VF 0000:3b:02.1 (ens1f0v1) into /var/run/netns/x");
        assert_eq!(e.msg, "moving VF 0000:3b:02.1 (ens1f0v1) into /var/run/netns/x: EBUSY");
        assert_eq!(e.code, Code::Io);
    }
}

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
}

#[derive(Debug, Clone)]
pub struct CniError {
    pub code: Code,
    pub msg: String,
    pub details: String,
}

impl CniError {
    pub fn new(code: Code, msg: impl Into<String>) -> Self {
        CniError { code, msg: msg.into(), details: String::new() }
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
        let out = Out { cni_version, code: self.code as u32, msg: &self.msg, details: &self.details };
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
        self.map_err(|e| CniError::io(format!("{}: {e}", what())))
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
    fn context_prefixes_the_message() {
        let e = CniError::io("EBUSY").context("moving VF 0000:3b:02.1 (ens1f0v1) into /var/run/netns/x");
        assert_eq!(e.msg, "moving VF 0000:3b:02.1 (ens1f0v1) into /var/run/netns/x: EBUSY");
        assert_eq!(e.code, Code::Io);
    }
}

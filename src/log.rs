//! Logging to stderr or the configured file; never to stdout, which carries the CNI result.

use crate::cni::config::LogLevel;
use crate::kernel::confined::Confined;
use std::fs::File;
use std::io::Write;
use std::sync::{Mutex, OnceLock};

struct Logger {
    level: LogLevel,
    file: Option<Mutex<File>>,
    /// Where a long-running process (the node daemon) takes each message instead: its own logging setup.
    sink: Option<fn(LogLevel, &str)>,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// Sets the level and sink once per process (later calls change nothing); without a file, stderr.
pub fn init(level: LogLevel, file: Option<File>) {
    if LOGGER.get().is_some() {
        return;
    }
    let _ = LOGGER.set(Logger { level, file: file.map(Mutex::new), sink: None });
}

/// Sets the level once per process and hands every message at or above it, control characters escaped, to
/// `sink` (the node daemon's `tracing` subscriber: its format, timestamps and fields).
pub fn init_with_sink(level: LogLevel, sink: fn(LogLevel, &str)) {
    let _ = LOGGER.set(Logger { level, file: None, sink: Some(sink) });
}

/// Opens the log for appending inside the node's log directory, never through a symbolic link and without ever
/// blocking: a FIFO (or socket) would stall the plugin on open or on a write, so only a regular file or a
/// character device (`/dev/null`) is taken.
pub fn open(path: &Confined) -> std::io::Result<File> {
    use std::os::unix::fs::FileTypeExt;
    let f = path.open_append(0o640)?;
    let t = f.metadata()?.file_type();
    if !(t.is_file() || t.is_char_device()) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, socket or directory would block or cannot be appended to)",
        ));
    }
    Ok(f)
}

/// A logged value may come from a tenant's configuration: a control character (a newline in `pfName`) is
/// written escaped, so it can never start a line of its own or rewrite one on a terminal.
fn escape_controls(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return s.into();
    }
    s.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

pub fn enabled(level: LogLevel) -> bool {
    LOGGER.get().map(|l| level <= l.level).unwrap_or(level <= LogLevel::Warning)
}

pub fn write(level: LogLevel, msg: std::fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let tag = match level {
        LogLevel::Error => "error",
        LogLevel::Warning => "warning",
        LogLevel::Info => "info",
        LogLevel::Debug => "debug",
    };
    let msg = msg.to_string();
    let msg = escape_controls(&msg);
    if let Some(sink) = LOGGER.get().and_then(|l| l.sink) {
        sink(level, &msg);
        return;
    }
    let line =
        format!("{}.{:03} sriov-rdma[{}] {tag}: {msg}\n", now.as_secs(), now.subsec_millis(), std::process::id());
    match LOGGER.get().and_then(|l| l.file.as_ref()) {
        Some(f) => {
            if let Ok(mut f) = f.lock() {
                let _ = f.write_all(line.as_bytes());
            }
        }
        None => {
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }
}

#[macro_export]
macro_rules! error { ($($t:tt)*) => { $crate::log::write($crate::cni::config::LogLevel::Error, format_args!($($t)*)) } }
#[macro_export]
macro_rules! warn { ($($t:tt)*) => { $crate::log::write($crate::cni::config::LogLevel::Warning, format_args!($($t)*)) } }
#[macro_export]
macro_rules! info { ($($t:tt)*) => { $crate::log::write($crate::cni::config::LogLevel::Info, format_args!($($t)*)) } }
#[macro_export]
macro_rules! debug { ($($t:tt)*) => { $crate::log::write($crate::cni::config::LogLevel::Debug, format_args!($($t)*)) } }

#[cfg(test)]
mod tests {
    use super::escape_controls;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape_controls("pfName ens1f0"), "pfName ens1f0");
        assert_eq!(escape_controls("pfName x\nFORGED\r\u{1b}[2K"), "pfName x\\nFORGED\\r\\u{1b}[2K");
        assert_eq!(escape_controls("tab\there é"), "tab\\there é");
    }
}

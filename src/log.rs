//! Logging to stderr or the configured file; never to stdout, which carries the CNI result.

use crate::cni::config::LogLevel;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

struct Logger {
    level: LogLevel,
    file: Option<Mutex<File>>,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// Sets the level and sink once per process (later calls change nothing and open nothing); a log file that
/// cannot be opened falls back to stderr.
pub fn init(level: LogLevel, file: Option<&Path>) {
    if LOGGER.get().is_some() {
        return;
    }
    let file = file.and_then(|p| match open_log(p) {
        Ok(f) => Some(Mutex::new(f)),
        Err(e) => {
            eprintln!("sriov-rdma: opening logFile {}: {e}; logging to stderr", p.display());
            None
        }
    });
    let _ = LOGGER.set(Logger { level, file });
}

/// Opens the log for appending without ever blocking: a FIFO (or socket) would stall the plugin on open or on
/// a write, so only a regular file or a character device (`/dev/null`) is taken.
fn open_log(p: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let f = OpenOptions::new().create(true).append(true).custom_flags(libc::O_NONBLOCK).open(p)?;
    let t = f.metadata()?.file_type();
    if !(t.is_file() || t.is_char_device()) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, socket or directory would block or cannot be appended to)",
        ));
    }
    Ok(f)
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

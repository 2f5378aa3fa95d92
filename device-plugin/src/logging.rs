//! The daemon's one logging setup: `tracing` with a level and a text or JSON format, on stderr (the container's
//! log). The messages of the code it shares with the CNI (`sriov_rdma_cni::{info, warn, ...}`) go through it too.

use sriov_rdma_cni::cni::config::LogLevel;
use tracing::Level;

/// How each line is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `2026-12-04T18:30:06.216Z  INFO sriov_rdma: message`
    Text,
    /// One JSON object per line: `{"timestamp":…,"level":"INFO","fields":{"message":…},"target":"sriov_rdma"}`.
    Json,
}

impl Format {
    pub fn parse(v: &str) -> Result<Format, String> {
        match v {
            "text" => Ok(Format::Text),
            "json" => Ok(Format::Json),
            _ => Err(format!("{v:?} is not text or json")),
        }
    }
}

/// `error`, `warning` (`warn`), `info`, `debug`.
pub fn parse_level(v: &str) -> Result<LogLevel, String> {
    match v {
        "error" => Ok(LogLevel::Error),
        "warning" | "warn" => Ok(LogLevel::Warning),
        "info" => Ok(LogLevel::Info),
        "debug" => Ok(LogLevel::Debug),
        _ => Err(format!("{v:?} is not error, warning, info or debug")),
    }
}

fn tracing_level(level: LogLevel) -> Level {
    match level {
        LogLevel::Error => Level::ERROR,
        LogLevel::Warning => Level::WARN,
        LogLevel::Info => Level::INFO,
        LogLevel::Debug => Level::DEBUG,
    }
}

fn forward(level: LogLevel, msg: &str) {
    match level {
        LogLevel::Error => tracing::error!(target: "sriov_rdma", "{msg}"),
        LogLevel::Warning => tracing::warn!(target: "sriov_rdma", "{msg}"),
        LogLevel::Info => tracing::info!(target: "sriov_rdma", "{msg}"),
        LogLevel::Debug => tracing::debug!(target: "sriov_rdma", "{msg}"),
    }
}

/// Installs the subscriber (once; a second call changes nothing).
pub fn init(level: LogLevel, format: Format) {
    let builder =
        tracing_subscriber::fmt().with_max_level(tracing_level(level)).with_writer(std::io::stderr).with_ansi(false);
    let installed = match format {
        Format::Text => builder.try_init(),
        Format::Json => builder.json().flatten_event(false).try_init(),
    };
    if installed.is_ok() {
        sriov_rdma_cni::log::init_with_sink(level, forward);
    }
}

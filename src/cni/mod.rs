//! The CNI protocol: environment, configuration, results and errors.

pub mod config;
pub mod env;
pub mod error;
pub mod result;
pub mod types;

pub use config::{NetConf, Version};
pub use env::{CniEnv, Command};
pub use error::{CniError, CniResult, Code};

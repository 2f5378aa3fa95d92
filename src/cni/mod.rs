//! The CNI protocol: environment, configuration, results and errors.

pub mod config;
pub mod env;
pub mod error;
pub mod result;
/// The value types live in [`crate::model`]; this path stays for the protocol layer's readers.
pub use crate::model as types;

pub use config::{NetConf, Version};
pub use env::{CniEnv, Command};
pub use error::{CniError, CniResult, Code};

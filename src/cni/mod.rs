//! The CNI protocol: environment, configuration, results and errors.

pub mod config;
pub mod env;
pub mod error;
pub mod result;

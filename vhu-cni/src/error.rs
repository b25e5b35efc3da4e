// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The CNI error result: `{"cniVersion", "code", "msg", "details"}` on
//! stdout and a non-zero exit status.
//!
//! | code | meaning |
//! |---|---|
//! | 1 | incompatible CNI version |
//! | 2 | unsupported field in the network configuration |
//! | 3 | unknown container |
//! | 4 | invalid or missing environment variable |
//! | 5 | I/O failure |
//! | 6 | cannot decode the configuration |
//! | 7 | invalid network configuration |
//! | 11 | try again later (the switch does not answer) |
//! | 50 | STATUS: the plugin is not available (the switch does not answer) |
//! | 100 | the switch refused a request |
//! | 101 | the attachment collides with something that exists (port, socket, interface) |
//! | 102 | a link operation in the pod's network namespace failed |
//! | 103 | CHECK: the attachment is not what ADD made |

use serde::Serialize;

/// Incompatible CNI version.
pub const INCOMPATIBLE_VERSION: u32 = 1;
/// Unsupported field in the network configuration.
pub const UNSUPPORTED_FIELD: u32 = 2;
/// Invalid or missing environment variable.
pub const INVALID_ENV: u32 = 4;
/// I/O failure.
pub const IO: u32 = 5;
/// The configuration does not decode.
pub const DECODE: u32 = 6;
/// Invalid network configuration.
pub const INVALID_CONFIG: u32 = 7;
/// Try again later.
pub const TRY_AGAIN: u32 = 11;
/// STATUS: not available.
pub const UNAVAILABLE: u32 = 50;
/// The switch refused a request.
pub const SWITCH_REFUSED: u32 = 100;
/// Something the attachment needs exists already.
pub const COLLISION: u32 = 101;
/// A link operation in the pod's network namespace failed.
pub const LINK: u32 = 102;
/// CHECK found the attachment changed.
pub const CHECK_FAILED: u32 = 103;

/// A CNI error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniError {
    /// The spec's (1-99) or this plugin's (100+) code.
    pub code: u32,
    /// What is wrong and what to fix.
    pub msg: String,
    /// More detail (a program's output, an OS error); may be empty.
    pub details: String,
}

impl CniError {
    /// An error with no details.
    pub fn new(code: u32, msg: impl Into<String>) -> Self {
        Self {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    /// The same error with details.
    #[must_use]
    pub fn details(mut self, d: impl Into<String>) -> Self {
        self.details = d.into();
        self
    }

    /// An invalid network configuration.
    pub fn config(msg: impl Into<String>) -> Self {
        Self::new(INVALID_CONFIG, msg)
    }

    /// An invalid environment variable.
    pub fn env(msg: impl Into<String>) -> Self {
        Self::new(INVALID_ENV, msg)
    }

    /// An I/O failure on `what`.
    pub fn io(what: impl std::fmt::Display, e: &std::io::Error) -> Self {
        Self::new(IO, format!("{what}: {e}"))
    }

    /// The JSON error result for a configuration of `version`.
    pub fn to_json(&self, version: &str) -> serde_json::Value {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Out<'a> {
            cni_version: &'a str,
            code: u32,
            msg: &'a str,
            #[serde(skip_serializing_if = "str::is_empty")]
            details: &'a str,
        }
        serde_json::to_value(Out {
            cni_version: version,
            code: self.code,
            msg: &self.msg,
            details: &self.details,
        })
        .unwrap_or_default()
    }
}

impl std::fmt::Display for CniError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "code {}: {}", self.code, self.msg)?;
        if !self.details.is_empty() {
            write!(f, " ({})", self.details)?;
        }
        Ok(())
    }
}

impl std::error::Error for CniError {}

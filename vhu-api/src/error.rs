// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The body of every refused request: `{"error": "<what is wrong and how to
//! fix it>"}`.

use serde::{Deserialize, Serialize};

/// A refused request's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiError {
    /// What is wrong, and how to fix it.
    pub error: String,
}

impl ApiError {
    /// An error body with this message.
    pub fn new(msg: impl Into<String>) -> Self {
        Self { error: msg.into() }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.error)
    }
}

impl std::error::Error for ApiError {}

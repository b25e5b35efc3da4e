// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The control API: HTTP/1.1 + JSON on a Unix socket (default
//! `/run/vhu/vhu.sock`, mode 0600: file permissions are the authentication).

pub mod http;
pub mod openapi;
pub mod routes;
pub mod server;

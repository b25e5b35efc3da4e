// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! `vhu-cni`: run by a container runtime with the `CNI_*` environment and
//! the network configuration on stdin; prints the result (or the error) on
//! stdout.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut stdin = Vec::new();
    let read = std::io::stdin().read_to_end(&mut stdin);
    let get = |k: &str| std::env::var(k).ok();
    let outcome = match read {
        Ok(_) => vhu_cni::cmd::run(&get, &stdin),
        Err(e) => Err(vhu_cni::error::CniError::io("cannot read stdin", &e)),
    };
    let (out, code) = match outcome {
        Ok(Some(v)) => (Some(v), ExitCode::SUCCESS),
        Ok(None) => (None, ExitCode::SUCCESS),
        Err(e) => {
            let version = vhu_cni::config::peek_version(&stdin)
                .unwrap_or_else(|| vhu_cni::config::SPEC_VERSION.to_owned());
            (Some(e.to_json(&version)), ExitCode::FAILURE)
        }
    };
    if let Some(v) = out {
        let mut o = std::io::stdout().lock();
        let _ = serde_json::to_writer(&mut o, &v);
        let _ = writeln!(o);
    }
    code
}

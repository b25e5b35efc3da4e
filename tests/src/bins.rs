// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Where the programs the end-to-end tests start are found (a variable
//! naming the binary, else the places a release build puts an example), and
//! how a finished program's output is shown in a failure message.

use std::path::PathBuf;
use std::process::ExitStatus;

/// The binary environment variable `var` names, if it is set.
///
/// # Panics
///
/// If it is set to a path that is not a file.
pub fn from_env(var: &str) -> Option<PathBuf> {
    let bin = PathBuf::from(std::env::var_os(var)?);
    assert!(bin.is_file(), "{var}={} does not exist", bin.display());
    Some(bin)
}

/// The first of `candidates` that exists: the places a release build of
/// the example `name` may be.
///
/// # Panics
///
/// If none does, saying to run `build` or set `var`.
pub fn built_example(name: &str, candidates: &[PathBuf], build: &str, var: &str) -> PathBuf {
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "the {name} example is not built: tried {candidates:?}; run \
                 `{build}` (or set {var})"
            )
        })
}

/// Writes how program `name` exited and all it printed, stdout then stderr.
///
/// # Errors
///
/// Those of `f`.
pub fn fmt_output(
    f: &mut std::fmt::Formatter<'_>,
    name: &str,
    status: &ExitStatus,
    stdout: &str,
    stderr: &str,
) -> std::fmt::Result {
    write!(
        f,
        "{name} exited with {status}\n----- {name} stdout -----\n{stdout}----- {name} stderr \
         -----\n{stderr}----- end of {name} output -----"
    )
}

/// A workspace binary `name` of the release build: `$var` when set, else
/// `target/release/<name>`.
///
/// # Panics
///
/// If neither exists (the message says how to build it).
pub fn release_bin(name: &str, var: &str) -> PathBuf {
    from_env(var).unwrap_or_else(|| {
        let built = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/release")
            .join(name);
        built_example(name, &[built], "cargo build --release --workspace", var)
    })
}

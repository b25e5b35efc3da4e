// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Compiles kubelet's DRA plugin API (`v1`, `v1beta1`) and its plugin
//! registration API (`proto/`, vendored unchanged; see
//! `proto/SOURCES.md`) with the pure-Rust `protox`, and generates the tonic
//! clients and servers.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/dra/v1/api.proto",
        "proto/dra/v1beta1/api.proto",
        "proto/pluginregistration/v1/api.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}

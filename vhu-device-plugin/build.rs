// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Compiles the kubelet device plugin API (`proto/api.proto`) with the
//! pure-Rust `protox` (no `protoc` needed) and generates the tonic client
//! and server code from its descriptor set.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/api.proto");
    let fds = protox::compile(["proto/api.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Compiles KubeVirt's hook protos with the pure-Rust `protox` (there is no
//! `protoc` to rely on) and generates the tonic services from the descriptor
//! set.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/api_info.proto", "proto/api_v1alpha3.proto"];
    for p in &protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}

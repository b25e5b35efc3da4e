// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Replays the committed seeds (and regression inputs) through the
//! harnesses without libFuzzer, and checks the committed `rings` seeds are
//! the ones `vhu_fuzz::rings::seeds()` generates.
//!
//! Regenerate the seeds with `VHU_WRITE_SEEDS=1 cargo test --test seeds`.

use std::fs;
use std::path::{Path, PathBuf};

fn dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("seeds")
        .join(target)
}

fn files(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v: Vec<_> = fs::read_dir(dir(target))
        .expect("seed directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let b = fs::read(&p).expect("read seed");
            (p, b)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn rings_seeds_are_generated() {
    let write = std::env::var_os("VHU_WRITE_SEEDS").is_some();
    for (name, bytes) in vhu_fuzz::rings::seeds() {
        let p = dir("rings").join(&name);
        if write {
            fs::write(&p, &bytes).expect("write seed");
        } else {
            let on_disk = fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert_eq!(
                on_disk,
                bytes,
                "{} is stale: regenerate the seeds",
                p.display()
            );
        }
    }
}

#[test]
fn net_hdr_seeds_are_generated() {
    let write = std::env::var_os("VHU_WRITE_SEEDS").is_some();
    let seeds: [(&str, [u8; 13]); 3] = [
        ("zero-10", [0; 13]),
        (
            "tso-ecn-12",
            [1, 1, 0x81, 54, 0, 0xa8, 5, 34, 0, 16, 0, 3, 0],
        ),
        ("ones-12", [0xff; 13]),
    ];
    for (name, bytes) in seeds {
        let p = dir("net_hdr").join(name);
        if write {
            fs::write(&p, bytes).expect("write seed");
        } else {
            assert_eq!(
                fs::read(&p).expect("seed"),
                bytes,
                "{} is stale",
                p.display()
            );
        }
    }
}

#[test]
fn replay_rings() {
    for (p, b) in files("rings") {
        eprintln!("{}: {}", p.display(), vhu_fuzz::rings::summary(&b));
    }
}

#[test]
fn replay_net_hdr() {
    for (p, b) in files("net_hdr") {
        eprintln!("{}", p.display());
        assert!(vhu_fuzz::net_hdr::run(&b), "{} rejected", p.display());
    }
}

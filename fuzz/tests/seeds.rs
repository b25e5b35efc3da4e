// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Replays the committed seeds (and regression inputs) through the
//! harnesses without libFuzzer, checks that the traffic seeds move frames
//! (a seed that moves nothing gives the fuzzer nothing to mutate), and
//! checks the committed `rings` seeds are the ones `vhu_fuzz::rings::seeds()`
//! generates.
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
    let all = files("rings");
    assert!(!all.is_empty(), "no rings seeds");
    let mut traffic = 0;
    for (p, b) in all {
        eprintln!("{}: {}", p.display(), vhu_fuzz::rings::summary(&b));
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with("-traffic") {
            // A traffic seed moves frames both ways (it also carries frames
            // meant to be dropped), exactly: the well-formed TX frames it
            // posts (two, three with indirect descriptors) are dequeued, and
            // the echoed and pushed frames that fit are delivered.
            let (rx, tx) = vhu_fuzz::rings::counters(&b);
            let indirect = name.contains("-ind-mrg-") || name.contains("-all-");
            let (want_tx, want_rx) = if indirect {
                ((3, 1000), (4, 1011))
            } else {
                ((2, 700), (2, 111))
            };
            assert_eq!((tx.packets, tx.bytes), want_tx, "{name}: tx {tx:?}");
            assert_eq!((rx.packets, rx.bytes), want_rx, "{name}: rx {rx:?}");
            traffic += 1;
        }
    }
    // split and packed x four feature sets.
    assert_eq!(traffic, 8, "traffic seeds");
}

#[test]
fn replay_net_hdr() {
    for (p, b) in files("net_hdr") {
        eprintln!("{}", p.display());
        assert!(vhu_fuzz::net_hdr::run(&b), "{} rejected", p.display());
    }
}

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
    // split and packed x five feature sets.
    assert_eq!(traffic, 10, "traffic seeds");
}

#[test]
fn replay_net_hdr() {
    for (p, b) in files("net_hdr") {
        eprintln!("{}", p.display());
        assert!(vhu_fuzz::net_hdr::run(&b), "{} rejected", p.display());
    }
}

/// Writes (`VHU_WRITE_SEEDS`) or compares the generated seeds of a target.
fn generated(target: &str, seeds: &[(String, Vec<u8>)]) {
    let write = std::env::var_os("VHU_WRITE_SEEDS").is_some();
    if write {
        fs::create_dir_all(dir(target)).expect("seed directory");
    }
    for (name, bytes) in seeds {
        let p = dir(target).join(name);
        if write {
            fs::write(&p, bytes).expect("write seed");
        } else {
            let on_disk = fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert_eq!(
                &on_disk,
                bytes,
                "{} is stale: regenerate the seeds",
                p.display()
            );
        }
    }
}

#[test]
fn wire_seeds() {
    use vhost_net_backend::io::offload::OffloadError;
    use vhost_net_backend::wire::HeadersError;
    let seeds = vhu_fuzz::wire::seeds();
    generated("wire", &seeds);
    // What each generated seed must do: (parse_headers ok or its error,
    // segments, frames lent).
    type Want = (
        &'static str,
        Result<(), HeadersError>,
        Result<usize, OffloadError>,
        Result<usize, OffloadError>,
    );
    let want: &[Want] = &[
        ("tso4-3x1000", Ok(()), Ok(3), Ok(3)),
        ("tso4-lent-as-is", Ok(()), Ok(3), Ok(1)),
        ("tso6-vlan-3x700", Ok(()), Ok(3), Ok(3)),
        ("uso4-4x800", Ok(()), Ok(4), Ok(4)),
        ("ufo4-3x1480", Ok(()), Ok(3), Ok(3)),
        ("ufo6-ext-2x1448", Ok(()), Ok(2), Ok(2)),
        ("ufo4-qinq-one", Ok(()), Ok(1), Ok(1)),
        (
            "tso4-small-scratch",
            Ok(()),
            Err(OffloadError::TooLarge),
            Err(OffloadError::TooLarge),
        ),
        ("csum-udp", Ok(()), Ok(1), Ok(1)),
        (
            "csum-offset-outside",
            Ok(()),
            Err(OffloadError::ChecksumOffset),
            Err(OffloadError::ChecksumOffset),
        ),
        ("plain", Ok(()), Ok(1), Ok(1)),
        (
            "bad-ihl",
            Err(HeadersError::IpHeader),
            Err(OffloadError::IpHeader),
            Err(OffloadError::IpHeader),
        ),
        (
            "gso-type-unknown",
            Ok(()),
            Err(OffloadError::GsoType(2)),
            Err(OffloadError::GsoType(2)),
        ),
    ];
    assert_eq!(seeds.len(), want.len());
    for (name, h, s, l) in want {
        let (_, b) = seeds.iter().find(|(n, _)| n == name).expect(name);
        let o = vhu_fuzz::wire::outcome(b).expect(name);
        assert_eq!(o.headers.map(|_| ()), *h, "{name}");
        assert_eq!((o.segments, o.lent), (*s, *l), "{name}");
    }
    // And every file on disk (including regression inputs) passes.
    for (p, b) in files("wire") {
        assert!(vhu_fuzz::wire::run(&b), "{} rejected", p.display());
    }
}

#[test]
fn http_seeds() {
    let seeds = vhu_fuzz::http::seeds();
    let bytes: Vec<(String, Vec<u8>)> = seeds
        .iter()
        .map(|(n, b, _)| (n.clone(), b.clone()))
        .collect();
    generated("http", &bytes);
    for (name, b, want) in &seeds {
        assert_eq!(&vhu_fuzz::http::answers(b), want, "{name}");
    }
    for (p, b) in files("http") {
        eprintln!("{}: {:?}", p.display(), vhu_fuzz::http::answers(&b));
    }
}

#[test]
fn cni_seeds() {
    let seeds = vhu_fuzz::cni::seeds();
    let bytes: Vec<(String, Vec<u8>)> = seeds
        .iter()
        .map(|(n, b, _)| (n.clone(), b.clone()))
        .collect();
    generated("cni", &bytes);
    for (name, b, want) in &seeds {
        assert_eq!(&vhu_fuzz::cni::outcome(b), want, "{name}");
    }
    for (p, b) in files("cni") {
        eprintln!("{}: {:?}", p.display(), vhu_fuzz::cni::outcome(&b));
    }
}

#[test]
fn cni_node_seeds() {
    let seeds = vhu_fuzz::cni_node::seeds();
    let bytes: Vec<(String, Vec<u8>)> = seeds
        .iter()
        .map(|(n, b, _)| (n.clone(), b.clone()))
        .collect();
    generated("cni_node", &bytes);
    for (name, b, want) in &seeds {
        assert_eq!(&vhu_fuzz::cni_node::outcome(b), want, "{name}");
    }
    for (p, b) in files("cni_node") {
        eprintln!("{}: {:?}", p.display(), vhu_fuzz::cni_node::outcome(&b));
    }
}

#[test]
fn switching_seeds() {
    let seeds = vhu_fuzz::switching::seeds();
    generated("switching", &seeds);
    for (name, b) in &seeds {
        let o = vhu_fuzz::switching::outcome(b);
        eprintln!("{name}: {o:?}");
    }
    // The first seed, by hand: round 1 floods a broadcast to 3 ports and
    // forwards one frame to the address just learned; round 2 forwards one,
    // drops one as hairpin and floods an unknown destination to 3.
    let (_, b) = &seeds[0];
    let o = vhu_fuzz::switching::outcome(b);
    assert_eq!(
        (o.events, o.delivered, o.dropped, o.entries),
        (2, 8, 1, 2),
        "trunks-learn-flood"
    );
    for (p, b) in files("switching") {
        let o = vhu_fuzz::switching::outcome(&b);
        eprintln!("{}: {o:?}", p.display());
        assert!(o.events > 0, "{} runs no event", p.display());
    }
}

#[test]
fn vhost_user_seeds() {
    let seeds = vhu_fuzz::vhost_user::seeds();
    generated("vhost_user", &seeds);
    for (name, b) in &seeds {
        let o = vhu_fuzz::vhost_user::outcome(b);
        eprintln!("{name}: {o:?}");
        let codes: Vec<u32> = o.replies.iter().map(|r| r.0).collect();
        if let Some(rest) = name.strip_prefix("refuse-") {
            // Refused at once: nothing answered (not even the GET_FEATURES
            // after it).
            assert!(o.refused.is_some(), "{rest}: the model refuses it");
            assert!(codes.is_empty(), "{name}: answered {codes:?}");
        }
        if name == "qemu-bring-up" {
            // GET_FEATURES, GET_PROTOCOL_FEATURES, GET_QUEUE_NUM (and its
            // ack? no: a GET has one reply), GET_MAX_MEM_SLOTS, the memory
            // table's ack, 6 acks per ring, GET_VRING_BASE.
            assert_eq!(o.refused, None, "{name}");
            assert_eq!(codes.first(), Some(&1), "{name}: {codes:?}");
            assert_eq!(codes.last(), Some(&11), "{name}: {codes:?}");
            assert!(
                o.replies
                    .iter()
                    .filter(|r| r.0 != 1 && r.0 != 11 && r.0 != 15 && r.0 != 17 && r.0 != 36)
                    .all(|r| r.1 == 0u64.to_le_bytes()),
                "{name}: every ack is a success: {:?}",
                o.replies
            );
        }
        if name == "early-enable-nack-then-raw" {
            assert_eq!(codes.first(), Some(&18), "{name}: {codes:?}");
            assert_eq!(o.replies[0].1, 1u64.to_le_bytes(), "{name}: NACK");
        }
    }
    for (p, b) in files("vhost_user") {
        let o = vhu_fuzz::vhost_user::outcome(&b);
        eprintln!("{}: {} replies", p.display(), o.replies.len());
        if p.ends_with("regress-vring-fd-index-high-bits-ignored") {
            // A SET_VRING_KICK whose payload has bits above 8 set names the
            // ring in bits 0-7 and is served (the fuzzer's first finding was
            // the model refusing it); the six GET_FEATURES after it answered.
            assert_eq!(o.refused, None, "{}", p.display());
            assert_eq!(o.replies.len(), 6, "{}", p.display());
        }
    }
}

#[test]
fn ring_differential_seeds() {
    use vhost_net_backend::DropReason::{BadAddress, BadDescriptor, TooLong, TooManySegments};
    let seeds = vhu_fuzz::ring_differential::seeds();
    generated("ring_differential", &seeds);
    // What each generated seed does: frames handed out, drops by reason.
    let want = [
        ("direct-one-by-one", 8, vec![]),
        ("direct-burst", 8, vec![]),
        ("indirect-nested-unaligned", 2, vec![(BadDescriptor, 1)]),
        ("bad-buffers", 2, vec![(BadDescriptor, 1), (BadAddress, 5)]),
        ("links-and-heads", 0, vec![(BadDescriptor, 6)]),
        ("indirect-segments-256", 1, vec![]),
        ("indirect-segments-257", 0, vec![(TooManySegments, 1)]),
        ("rx-direct-indirect-too-small", 4, vec![(TooLong, 1)]),
        (
            "rx-bad-chains",
            0,
            vec![(BadDescriptor, 3), (BadAddress, 1)],
        ),
    ];
    assert_eq!(seeds.len(), want.len());
    for ((name, b), (n, frames, drops)) in seeds.iter().zip(want) {
        assert_eq!(name, n);
        let o = vhu_fuzz::ring_differential::outcome(b);
        assert_eq!((o.frames, o.drops), (frames, drops), "{name}");
    }
    for (p, b) in files("ring_differential") {
        let o = vhu_fuzz::ring_differential::outcome(&b);
        eprintln!("{}: {o:?}", p.display());
        assert!(o.chains > 0, "{} lays no chain", p.display());
    }
}

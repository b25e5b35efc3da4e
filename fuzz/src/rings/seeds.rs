// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Seed inputs for the `rings` target: valid traffic in every ring format
//! and feature set, and the hostile shapes the model knows.

use super::*;

// ===== seeds =====

/// Well-formed inputs for the seed corpus: every ring format and feature
/// combination, valid traffic both ways, plus a few classic hostile cases.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for packed in [false, true] {
        for (fname, fb) in [
            ("plain", 0u8),
            ("evidx", cfg::EVENT_IDX),
            ("ind-mrg", cfg::INDIRECT | cfg::MRG),
            (
                "all",
                cfg::EVENT_IDX | cfg::INDIRECT | cfg::MRG | cfg::OFFLOADS,
            ),
            (
                "all-inorder",
                cfg::EVENT_IDX | cfg::INDIRECT | cfg::MRG | cfg::OFFLOADS | cfg::IN_ORDER,
            ),
        ] {
            let cb = fb | if packed { cfg::PACKED } else { 0 };
            let fmt = if packed { "packed" } else { "split" };
            // Size 16 (split: 1 << 4; packed: 1 + 15), 256-byte buffers.
            let size_b = if packed { 15 } else { 4 };
            let mut e = Enc::default();
            e.u8(cb).u8(size_b).u8(2);
            // Valid traffic: post RX buffers, post TX frames of several
            // shapes, echo, then TX and RX bursts.
            for _ in 0..4 {
                e.u8(op::POST_RX).u8(0); // 1 full buffer
            }
            e.u8(op::POST_RX).u8(0x03); // 4 buffers in a chain
            e.u8(op::POST_TX).u8(0x00).u16(100).u8(7); // 1 desc
            e.u8(op::POST_TX).u8(0x02).u16(600).u8(9); // 3 descs
            if fb & cfg::INDIRECT != 0 {
                e.u8(op::POST_TX).u8(0x11).u16(300).u8(3); // indirect, 2 descs
                e.u8(op::POST_RX).u8(0x11); // indirect RX
            }
            e.u8(op::ECHO).u8(8).u16(10);
            e.u8(op::POST_TX).u8(0x01).u16(1500 % 500).u8(1);
            e.u8(op::TX_BURST).u8(32).u16(0);
            e.u8(op::RX_BURST).u8(2); // 3 frames
            e.u8(1).u8(10).u8(1).u8(0); // small
            e.u8(2).u16(1000).u8(2).u8(2); // csum + gso none
            e.u8(8).u16(3000).u8(3).u8(0); // raw u16 len
            e.u8(op::NOTIFY).u8(2).u8(op::NOTIFY).u8(3);
            e.u8(op::QUERY).u8(0).u8(64).u8(op::QUERY).u8(1).u8(0);
            out.push((format!("{fmt}-{fname}-traffic"), e.0));

            // Hostile: a descriptor loop / out-of-range address posted,
            // then a stale and a far-ahead avail index.
            let mut e = Enc::default();
            e.u8(cb).u8(size_b).u8(2);
            e.u8(op::RAW_DESC).u8(0x03).u16(0); // TX, posted
            e.u8(0).u16(1).u8(2).u8(0x01).u8(1); // own buf, buf_len, NEXT, self loop
            e.u8(op::RAW_DESC).u8(0x03).u16(1);
            e.u8(6).u8(3).u8(4).u8(0).u8(0); // base+len, 4 GiB
            e.u8(op::TX_BURST).u8(8).u16(0);
            e.u8(op::INDIRECT).u8(0x05).u16(2).u8(3); // TX, nested-capable
            e.u8(0).u16(3).u8(1).u8(7).u8(0).u8(1); // entry 0
            e.u8(0).u16(4).u8(2).u8(6).u8(0);
            e.u8(0).u16(5).u8(2).u8(0).u8(0);
            e.u8(0).u8(0).u16(0); // right length, no NEXT, posted
            e.u8(op::TX_BURST).u8(8).u16(0);
            e.u8(op::AVAIL).u8(0x05).u8(4); // TX: stale index / packed flags
            e.u8(op::TX_BURST).u8(8).u16(0);
            e.u8(op::AVAIL).u8(0x05).u8(3); // TX: size + 1 ahead
            e.u8(op::TX_BURST).u8(8).u16(0);
            e.u8(op::POST_RX).u8(0x00).u8(op::RX_BURST).u8(0).u8(4);
            out.push((format!("{fmt}-{fname}-hostile"), e.0));
        }
    }
    // The RX segment budget: with mergeable buffers, a 64 KiB frame over
    // chains of 64 small indirect buffers each needs more segments than
    // the queue holds (dropped as TooLong, buffers left to the guest); a
    // smaller frame then fits.
    let mut e = Enc::default();
    e.u8(cfg::INDIRECT | cfg::MRG).u8(7).u8(4); // split, 128 x 1 KiB
    for _ in 0..20 {
        e.u8(op::POST_RX).u8(0x73); // indirect, 64 entries, chosen lengths
        for _ in 0..64 {
            e.u16(32);
        }
    }
    e.u8(op::RX_BURST).u8(1); // 2 frames
    e.u8(4).u8(0).u8(0); // MAX_FRAME_LEN
    e.u8(2).u16(900).u8(0).u8(0); // 960 bytes
    out.push(("split-rx-segment-budget".to_string(), e.0));

    // Regression inputs for two engine bugs the fuzzer found (fixed; see
    // fuzz/README.md).
    //
    // Packed ring whose every slot says NEXT: RingBroken was counted twice
    // (as the chain's drop and by `finish_burst`); now once, and the burst
    // dequeues nothing.
    let mut e = Enc::default();
    e.u8(cfg::PACKED).u8(1).u8(0); // size 2
    for _ in 0..2 {
        // TX, at the driver's position: own buffer, buf_len, NEXT.
        e.u8(op::RAW_DESC).u8(0x03).u16(0);
        e.u8(0).u16(0).u8(2).u8(0x01).u8(0);
    }
    e.u8(op::TX_BURST).u8(8).u16(0);
    out.push(("regress-packed-ring-broken-counted-twice".to_string(), e.0));

    // Split ring: 8 entries read into the avail cache, then avail.idx
    // jumps 0x8000 ahead: the refresh marks the ring broken; `recv_burst`
    // used to dequeue the 8 cached entries anyway, now nothing.
    let mut e = Enc::default();
    e.u8(0).u8(3).u8(0); // split, size 8
    e.u8(op::AVAIL).u8(0x05).u8(2); // TX avail.idx += 8
    e.u8(op::QUERY).u8(1).u8(0); // pending() = 8
    e.u8(op::AVAIL).u8(0x05).u8(5); // TX avail.idx += 0x8000
    e.u8(op::QUERY).u8(1).u8(0); // pending() = 0
    e.u8(op::TX_BURST).u8(32).u16(0); // 8 frames
    out.push(("regress-split-broken-ring-serves-cache".to_string(), e.0));

    // Split ring whose avail.idx jumps 0x8000 ahead before any burst: a
    // look (`pending`, `available`) finds it broken and is followed by no
    // burst, so the look counts `ring_broken`; later looks and the burst
    // do not count it again.
    let mut e = Enc::default();
    e.u8(0).u8(3).u8(0); // split, size 8
    e.u8(op::AVAIL).u8(0x05).u8(5); // TX avail.idx += 0x8000
    e.u8(op::QUERY).u8(1).u8(0); // pending() = 0: ring_broken 1
    e.u8(op::QUERY).u8(1).u8(0); // pending() = 0: still 1
    e.u8(op::TX_BURST).u8(32).u16(0); // nothing: still 1
    out.push(("regress-split-broken-ring-found-by-a-look".to_string(), e.0));
    out
}

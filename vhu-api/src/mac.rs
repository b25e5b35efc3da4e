// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Ethernet MAC addresses as the API writes them: six hexadecimal octets
//! separated by colons (`52:54:00:12:34:56`; upper or lower case on input,
//! lower case on output).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 48-bit Ethernet address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// Whether the group bit is set (multicast or broadcast).
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }

    /// Whether this is `00:00:00:00:00:00`.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 6]
    }

    /// Whether a host may use it as a source address: not multicast, not
    /// zero.
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast() && !self.is_zero()
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// Why a string is not a MAC address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a MAC address (expected six hexadecimal octets like 52:54:00:12:34:56)")]
pub struct ParseMacError(pub String);

impl FromStr for MacAddr {
    type Err = ParseMacError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseMacError(s.to_owned());
        let mut out = [0u8; 6];
        let mut parts = s.split(':');
        for b in &mut out {
            let p = parts.next().ok_or_else(err)?;
            if p.len() != 2 || !p.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(err());
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| err())?;
        }
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(MacAddr(out))
    }
}

impl Serialize for MacAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MacAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let m: MacAddr = "52:54:00:AB:cd:0f".parse().unwrap();
        assert_eq!(m.0, [0x52, 0x54, 0x00, 0xab, 0xcd, 0x0f]);
        assert_eq!(m.to_string(), "52:54:00:ab:cd:0f");
        assert!(m.is_unicast());
        assert!(MacAddr::BROADCAST.is_multicast());
        assert!(!MacAddr::default().is_unicast());
        assert!("01:00:5e:00:00:01"
            .parse::<MacAddr>()
            .unwrap()
            .is_multicast());
    }

    #[test]
    fn rejects_malformed() {
        for s in [
            "",
            "52:54:00:12:34",
            "52:54:00:12:34:56:78",
            "52-54-00-12-34-56",
            "5:54:00:12:34:56",
            "552:54:00:12:34:56",
            "52:54:00:12:34:g6",
            "+2:54:00:12:34:56",
            "52:54:00:12:34:56:",
        ] {
            assert!(s.parse::<MacAddr>().is_err(), "{s:?}");
        }
    }

    #[test]
    fn serde_round_trip() {
        let m = MacAddr([2, 0, 0, 0, 0, 1]);
        let j = serde_json::to_string(&m).unwrap();
        assert_eq!(j, "\"02:00:00:00:00:01\"");
        assert_eq!(serde_json::from_str::<MacAddr>(&j).unwrap(), m);
        let e = serde_json::from_str::<MacAddr>("\"zz\"").unwrap_err();
        assert!(e.to_string().contains("not a MAC address"), "{e}");
    }
}

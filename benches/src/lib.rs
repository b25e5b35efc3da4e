//! Benches live in `benches/benches/`; see the README.

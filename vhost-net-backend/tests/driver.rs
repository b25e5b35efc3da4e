//! In-process driver tests (see the crate docs).

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! Software fallbacks for offloads a destination lacks: completing partial
//! checksums and segmenting TSO/UFO/USO super-frames.

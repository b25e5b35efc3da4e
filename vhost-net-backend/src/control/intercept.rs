// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The vhost-user requests a port takes ahead of the `vhost` crate: before
//! the crate's handler reads a message, [`intercept`] peeks at its header
//! and takes it when it is one of three the crate cannot serve:
//!
//! * `SET_VRING_ENABLE` before `SET_FEATURES` acked `PROTOCOL_FEATURES`.
//!   QEMU sends one per vring right after the protocol-feature handshake,
//!   with `NEED_REPLY`, and waits for the ack; the crate refuses the
//!   message without replying (the feature is not acked yet), which would
//!   hang the frontend. The requested state is recorded (it applies once
//!   the ring starts) and acked.
//! * `SET_LOG_FD` ([`set_log_fd`]), which the crate would close the
//!   connection on.
//! * `SEND_RARP` ([`send_rarp`]), which the crate does not handle.
//!
//! Every other request goes to the crate's handler and [`super::PortCtl`].

use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::PortCtl;
use crate::device::bits;
use crate::sys;

/// What a port does with a `SEND_RARP` (a migrated guest's MAC, on the
/// target): announce the address on the network. Called on the port's
/// control thread, with no lock held; returns whether the announce was
/// accepted (a refusal is NACKed to a frontend that asked for a reply).
pub type AnnounceHandler = Arc<dyn Fn([u8; 6]) -> bool + Send + Sync>;

/// The port state the intercepted requests read and change.
pub(crate) struct Intercept<'a> {
    /// The port's name, for logs.
    pub name: &'a str,
    /// The request handler (`SET_VRING_ENABLE` is recorded there).
    pub ctl: &'a Mutex<PortCtl>,
    /// The acked virtio features.
    pub acked: &'a AtomicU64,
    /// Where `SEND_RARP` goes.
    pub announce: &'a Mutex<Option<AnnounceHandler>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `VHOST_USER_SET_VRING_ENABLE`.
const REQ_SET_VRING_ENABLE: u32 = 18;
/// `VHOST_USER_SET_LOG_FD`.
const REQ_SET_LOG_FD: u32 = 7;
/// `VHOST_USER_SEND_RARP`.
const REQ_SEND_RARP: u32 = 19;
/// Header flags: protocol version 1, reply, need-reply.
const HDR_VERSION_1: u32 = 0x1;
const HDR_REPLY: u32 = 0x4;
const HDR_NEED_REPLY: u32 = 0x8;

/// Peeks at the next request's header and takes it when it is one of the
/// three the `vhost` crate cannot serve (see the [module
/// documentation](self)); returns whether a message was consumed (when
/// not, the crate's handler reads it).
///
/// # Errors
/// The connection broke, or a taken request was invalid: close it.
pub(crate) fn intercept(
    inner: &Intercept<'_>,
    sock: &UnixStream,
) -> Result<bool, vhost::vhost_user::Error> {
    use std::io::Read;
    use vhost::vhost_user::Error as E;
    use vhost::vhost_user::VhostUserBackendReqHandlerMut;

    let mut hdr = [0u8; 12];
    match sys::peek(sock, &mut hdr) {
        Ok(0) => return Err(E::Disconnected),
        Ok(n) if n < hdr.len() => return Ok(false), // let the crate report it
        Ok(_) => {}
        Err(e) => return Err(E::SocketError(e)),
    }
    let word = |i: usize| u32::from_le_bytes(hdr[i..i + 4].try_into().expect("4 bytes"));
    let (request, flags, size) = (word(0), word(4), word(8));
    if request == REQ_SET_LOG_FD && size == 0 {
        return set_log_fd(inner, sock, flags).map(|()| true);
    }
    if request == REQ_SEND_RARP {
        return send_rarp(inner, sock, flags, size).map(|()| true);
    }
    let protocol_acked = inner.acked.load(Ordering::Acquire) & bits::PROTOCOL_FEATURES != 0;
    if request != REQ_SET_VRING_ENABLE || protocol_acked || size != 8 {
        return Ok(false);
    }
    // A SET_VRING_ENABLE before SET_FEATURES acked PROTOCOL_FEATURES.
    let mut msg = [0u8; 20];
    (&*sock).read_exact(&mut msg).map_err(E::SocketBroken)?;
    let index = u32::from_le_bytes(msg[12..16].try_into().expect("4 bytes"));
    let num = u32::from_le_bytes(msg[16..20].try_into().expect("4 bytes"));
    let res = match num {
        0 | 1 => lock(inner.ctl).set_vring_enable(index, num == 1),
        _ => Err(E::InvalidParam),
    };
    tracing::debug!(
        "port {}: SET_VRING_ENABLE({index}, {num}) before features were acked: {}",
        inner.name,
        if res.is_ok() { "recorded" } else { "refused" }
    );
    if flags & HDR_NEED_REPLY != 0 {
        ack(sock, REQ_SET_VRING_ENABLE, res.is_err())?;
    } else {
        res?;
    }
    Ok(true)
}

/// Writes a `REPLY_ACK` reply to `request` (`failed`: a non-zero status).
fn ack(sock: &UnixStream, request: u32, failed: bool) -> Result<(), vhost::vhost_user::Error> {
    use std::io::Write;
    let mut reply = [0u8; 20];
    reply[0..4].copy_from_slice(&request.to_le_bytes());
    reply[4..8].copy_from_slice(&(HDR_VERSION_1 | HDR_REPLY).to_le_bytes());
    reply[8..12].copy_from_slice(&8u32.to_le_bytes());
    reply[12..20].copy_from_slice(&u64::from(failed).to_le_bytes());
    (&*sock)
        .write_all(&reply)
        .map_err(vhost::vhost_user::Error::SocketBroken)
}

/// Takes a `SET_LOG_FD` (which the `vhost` crate does not handle and would
/// close the connection on): the eventfd it carries is accepted and closed
/// unused (read without ancillary space, the kernel closes it). The log
/// itself needs no signal: the frontend reads the bitmap when it syncs
/// (QEMU's vhost-user frontend never sends this message).
fn set_log_fd(
    inner: &Intercept<'_>,
    sock: &UnixStream,
    flags: u32,
) -> Result<(), vhost::vhost_user::Error> {
    use std::io::Read;
    let mut hdr = [0u8; 12];
    (&*sock)
        .read_exact(&mut hdr)
        .map_err(vhost::vhost_user::Error::SocketBroken)?;
    tracing::debug!("port {}: SET_LOG_FD accepted (not signalled)", inner.name);
    if flags & HDR_NEED_REPLY != 0 {
        ack(sock, REQ_SET_LOG_FD, false)?;
    }
    Ok(())
}

/// Takes a `SEND_RARP` (which the `vhost` crate does not handle): the MAC
/// in the first 6 bytes of its u64 payload goes to the announce handler,
/// and the frontend gets the handler's answer when it asked for a reply
/// (`REPLY_ACK`). Without the `RARP` protocol feature acked, or with
/// another payload size, the request is invalid: NACKed and the connection
/// closed, like every invalid request.
fn send_rarp(
    inner: &Intercept<'_>,
    sock: &UnixStream,
    flags: u32,
    size: u32,
) -> Result<(), vhost::vhost_user::Error> {
    use std::io::Read;
    use vhost::vhost_user::message::VhostUserProtocolFeatures as P;
    use vhost::vhost_user::Error as E;
    if size != 8 {
        tracing::warn!("port {}: SEND_RARP of {size} bytes", inner.name);
        return Err(E::InvalidMessage);
    }
    let mut msg = [0u8; 20];
    (&*sock).read_exact(&mut msg).map_err(E::SocketBroken)?;
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&msg[12..18]);
    let shown = crate::wire::MacAddr(mac);
    if !lock(inner.ctl).protocol_acked(P::RARP) {
        tracing::warn!(
            "port {}: SEND_RARP {shown} without the RARP protocol feature",
            inner.name
        );
        if flags & HDR_NEED_REPLY != 0 {
            ack(sock, REQ_SEND_RARP, true)?;
        }
        return Err(E::InvalidOperation("SEND_RARP without PROTOCOL_F_RARP"));
    }
    let handler = lock(inner.announce).clone();
    let accepted = match handler {
        Some(h) => h(mac),
        None => {
            tracing::debug!(
                "port {}: SEND_RARP {shown}: no announce handler",
                inner.name
            );
            true
        }
    };
    tracing::info!(
        "port {}: SEND_RARP {shown}: {}",
        inner.name,
        if accepted { "announced" } else { "refused" }
    );
    if flags & HDR_NEED_REPLY != 0 {
        ack(sock, REQ_SEND_RARP, !accepted)?;
    }
    Ok(())
}

// SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause
//! The control socket's server: accepts connections, one thread each (at
//! most [`MAX_CONNECTIONS`] at once; more get a 503), one request per
//! connection, with read and write timeouts so that a stuck client holds
//! nothing but its own thread.
//!
//! Only root and the switch's own user may use it: the socket is `0600`,
//! and each connection's peer is checked with `SO_PEERCRED` as well (a mode
//! an operator loosened, or the moment between `bind` and `chmod`, lets
//! nobody else in); others get a 403 and the refusal is logged.

use std::io::{BufWriter, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vhost_net_backend::{Poller, Token};

use super::http::{self, Response};
use super::routes::{self, CaptureRequest, Reply};
use crate::capture;
use crate::switch::Switch;

/// Most connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send its request or read the answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the accept loop looks at the stop flag.
const STOP_CHECK: Duration = Duration::from_millis(200);
/// Most bytes of a refused request read (and dropped) before closing.
const MAX_DRAIN: u64 = 16 * 1024 * 1024;
/// How long the rest of a refused request may take to arrive.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a capture with nothing to write sleeps between looks.
const CAPTURE_NAP: Duration = Duration::from_millis(2);

/// Serves `listener` until `stop` is set.
///
/// # Errors
/// The listener cannot be watched.
pub fn serve(
    listener: &UnixListener,
    sw: &Arc<Switch>,
    openapi: &Arc<String>,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut poller = Poller::new()?;
    poller.add_fd(listener.as_raw_fd(), Token(1))?;
    let active = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::Relaxed) {
        poller.wait(Some(STOP_CHECK))?;
        loop {
            let stream = match listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("control: accept: {e}");
                    break;
                }
            };
            if active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
                active.fetch_sub(1, Ordering::AcqRel);
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                let body = br#"{"error":"too many control connections at once; retry"}"#.to_vec();
                let _ = Response::json(503, body).write_to(&mut &stream);
                continue;
            }
            let (sw, openapi, active) = (Arc::clone(sw), Arc::clone(openapi), Arc::clone(&active));
            let spawned = std::thread::Builder::new()
                .name("vhu-ctl".into())
                .spawn(move || {
                    connection(stream, &sw, &openapi);
                    active.fetch_sub(1, Ordering::AcqRel);
                });
            if let Err(e) = spawned {
                tracing::warn!("control: cannot start a connection thread: {e}");
            }
        }
    }
    Ok(())
}

/// Whether the peer of `stream` may use the API: root or the switch's own
/// effective user.
fn admitted(stream: &UnixStream) -> Result<(), String> {
    use vhost_net_backend::sys::unix::{effective_uid, peer_cred};
    let me = effective_uid();
    match peer_cred(stream) {
        Ok(c) if c.uid == 0 || c.uid == me => Ok(()),
        Ok(c) => Err(format!(
            "uid {} (pid {}) may not use the control API: only root and uid {me} may",
            c.uid, c.pid
        )),
        Err(e) => Err(format!("the peer's credentials are unreadable: {e}")),
    }
}

fn connection(stream: UnixStream, sw: &Arc<Switch>, openapi: &str) {
    if stream.set_nonblocking(false).is_err()
        || stream.set_read_timeout(Some(IO_TIMEOUT)).is_err()
        || stream.set_write_timeout(Some(IO_TIMEOUT)).is_err()
    {
        return;
    }
    // The request is read (and dropped) before a refused peer's 403, so
    // that it gets the answer rather than a reset connection.
    let refused = admitted(&stream).err();
    let req = match (http::read_request(&mut &stream), refused) {
        (Ok(_) | Err(Some(_)), Some(why)) => {
            tracing::warn!("control: connection refused: {why}");
            return answer_and_close(&stream, 403, why);
        }
        (Ok(r), None) => r,
        (Err(None), _) => return,
        (Err(Some(e)), None) => return answer_and_close(&stream, e.status, e.message),
    };
    tracing::debug!("control: {} {}", req.method, req.path);
    match routes::handle(&**sw, openapi, &req) {
        Reply::Full(r) => {
            let _ = r.write_to(&mut &stream);
        }
        Reply::Capture(c) => capture_stream(&stream, sw, &c),
    }
}

/// Answers `status` with `message` and closes, reading what the client
/// still sends (an oversized body) first: closing a Unix socket with unread
/// data resets the connection, and the client would lose the answer.
fn answer_and_close(stream: &UnixStream, status: u16, message: String) {
    let body = serde_json::to_vec(&vhu_api::ApiError::new(message)).unwrap_or_default();
    let _ = Response::json(status, body).write_to(&mut &*stream);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(DRAIN_TIMEOUT));
    let _ = std::io::copy(&mut stream.take(MAX_DRAIN), &mut std::io::sink());
}

/// Streams a capture until its count or time is reached or the client
/// goes away.
fn capture_stream(stream: &UnixStream, sw: &Switch, c: &CaptureRequest) {
    let Some(tap) = sw.capture_tap(&c.port) else {
        let body = serde_json::to_vec(&vhu_api::ApiError::new(format!("no port {:?}", c.port)))
            .unwrap_or_default();
        let _ = Response::json(404, body).write_to(&mut &*stream);
        return;
    };
    if !tap.start() {
        let msg = format!("a capture already runs on port {:?}; one at a time", c.port);
        let body = serde_json::to_vec(&vhu_api::ApiError::new(msg)).unwrap_or_default();
        let _ = Response::json(409, body).write_to(&mut &*stream);
        return;
    }
    tracing::info!("port {:?}: capture started", c.port);
    let mut w = BufWriter::new(stream);
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.tcpdump.pcap\r\n\
                Connection: close\r\n\r\n";
    let deadline = c.seconds.map(|s| Instant::now() + Duration::from_secs(s));
    let mut written = 0u64;
    let res = (|| -> std::io::Result<()> {
        w.write_all(head.as_bytes())?;
        capture::write_header(&mut w, &c.port)?;
        w.flush()?;
        loop {
            if c.count.is_some_and(|n| written >= n)
                || deadline.is_some_and(|d| Instant::now() >= d)
            {
                return Ok(());
            }
            match tap.take() {
                Some(r) => {
                    capture::write_record(&mut w, &r)?;
                    written += 1;
                }
                None => {
                    w.flush()?;
                    std::thread::sleep(CAPTURE_NAP);
                }
            }
        }
    })();
    let _ = w.flush();
    tap.stop();
    tracing::info!(
        "port {:?}: capture ended after {written} frames ({} not captured: queue full){}",
        c.port,
        tap.dropped(),
        match res {
            Ok(()) => String::new(),
            Err(e) => format!(", client gone: {e}"),
        }
    );
}

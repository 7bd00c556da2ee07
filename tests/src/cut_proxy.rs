//! A TCP proxy in front of a PostgreSQL server that loses one answer on
//! cue: the connection is cut after the server has answered a statement
//! (and, in autocommit, committed it) and before the client sees a byte of
//! that answer. The server and the commit are real; only the reply is
//! lost, as when a network drops between the two.
//!
//! The cue is a byte pattern (say, an operation's key): the first message
//! a client sends carrying it arms its connection, the server's reply is
//! held back until the server says it is ready for the next query
//! (`ReadyForQuery`, sent only once the statement's implicit transaction
//! is over), and then both sides are closed. Connect with `sslmode=disable`:
//! the proxy reads the server's messages to find that point.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

/// The running proxy; it stops accepting when dropped.
pub struct CutProxy {
    port: u16,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// The pattern that arms the next connection carrying it (one cut).
    armed: Mutex<Option<Vec<u8>>>,
    cuts: AtomicUsize,
    stopped: AtomicBool,
}

impl CutProxy {
    /// Listens on a free local port, forwarding to `upstream`.
    pub fn start(upstream: SocketAddr) -> io::Result<CutProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared::default());
        let accepting = shared.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                let shared = accepting.clone();
                thread::spawn(move || {
                    // A connection that fails is the client's to notice.
                    let _ = relay(client, server, shared);
                });
            }
        });
        Ok(CutProxy { port, shared })
    }

    /// The port to connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Arms the cut: the reply to the next client message carrying
    /// `pattern` is lost with its connection.
    pub fn cut_reply_to(&self, pattern: &[u8]) {
        *self.shared.armed.lock().unwrap() = Some(pattern.to_vec());
    }

    /// How many replies were lost so far.
    pub fn cuts(&self) -> usize {
        self.shared.cuts.load(Ordering::SeqCst)
    }

    /// Whether the armed pattern is still waiting for its message.
    pub fn is_armed(&self) -> bool {
        self.shared.armed.lock().unwrap().is_some()
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// One connection: client → server on this thread's helper, server →
/// client here.
fn relay(client: TcpStream, server: TcpStream, shared: Arc<Shared>) -> io::Result<()> {
    let cut = Arc::new(AtomicBool::new(false));
    let (mut from_client, mut to_server) = (client.try_clone()?, server.try_clone()?);
    let upstream = {
        let (cut, shared) = (cut.clone(), shared.clone());
        thread::spawn(move || -> io::Result<()> {
            let mut buf = [0u8; 16 * 1024];
            // The tail of what came before, so that a pattern split across
            // two reads is still found.
            let mut window: Vec<u8> = Vec::new();
            loop {
                let n = from_client.read(&mut buf)?;
                if n == 0 {
                    return Ok(());
                }
                window.extend_from_slice(&buf[..n]);
                let mut armed = shared.armed.lock().unwrap();
                let keep = match armed.as_deref() {
                    Some(pattern) if contains(&window, pattern) => {
                        // Armed before the message goes on: the reply can
                        // only come after.
                        cut.store(true, Ordering::SeqCst);
                        *armed = None;
                        0
                    }
                    Some(pattern) => pattern.len().saturating_sub(1),
                    None => 0,
                };
                drop(armed);
                window.drain(..window.len() - keep.min(window.len()));
                to_server.write_all(&buf[..n])?;
            }
        })
    };
    let (mut from_server, mut to_client) = (server, client);
    let mut messages = Messages::default();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from_server.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !cut.load(Ordering::SeqCst) {
            messages.feed(&buf[..n]);
            if to_client.write_all(&buf[..n]).is_err() {
                break;
            }
            continue;
        }
        // Held back: nothing of this reply reaches the client.
        if messages.feed(&buf[..n]) {
            shared.cuts.fetch_add(1, Ordering::SeqCst);
            break;
        }
    }
    let _ = to_client.shutdown(Shutdown::Both);
    let _ = from_server.shutdown(Shutdown::Both);
    let _ = upstream.join();
    Ok(())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// The server's side of the protocol, message by message (a type byte, a
/// length that counts itself, the body): enough to see `ReadyForQuery`.
#[derive(Default)]
struct Messages {
    header: Vec<u8>,
    skip: usize,
}

impl Messages {
    /// Reads `bytes`; whether a `ReadyForQuery` ('Z') began among them.
    fn feed(&mut self, bytes: &[u8]) -> bool {
        let mut ready = false;
        let mut i = 0;
        while i < bytes.len() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len() - i);
                self.skip -= n;
                i += n;
                continue;
            }
            self.header.push(bytes[i]);
            i += 1;
            if self.header.len() == 5 {
                let len = u32::from_be_bytes([
                    self.header[1],
                    self.header[2],
                    self.header[3],
                    self.header[4],
                ]);
                ready |= self.header[0] == b'Z';
                self.skip = (len as usize).saturating_sub(4);
                self.header.clear();
            }
        }
        ready
    }
}

#[cfg(test)]
mod tests {
    use super::Messages;

    #[test]
    fn ready_for_query_is_found_across_reads() {
        // CommandComplete "INSERT 0 1", then ReadyForQuery idle.
        let mut wire = vec![b'C'];
        wire.extend_from_slice(&15u32.to_be_bytes());
        wire.extend_from_slice(b"INSERT 0 1\0");
        wire.push(b'Z');
        wire.extend_from_slice(&5u32.to_be_bytes());
        wire.push(b'I');
        let mut m = Messages::default();
        let (a, b) = wire.split_at(17);
        assert!(!m.feed(a), "no Z yet");
        assert!(m.feed(b));
        // A 'Z' byte inside a body is not a message.
        let mut m = Messages::default();
        let mut body = vec![b'D'];
        body.extend_from_slice(&6u32.to_be_bytes());
        body.extend_from_slice(b"ZZ");
        assert!(!m.feed(&body));
    }
}

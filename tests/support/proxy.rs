//! A TCP proxy in front of a test server whose client-to-server direction can be held:
//! what a client sends (an unsubscribe, an ack) waits in the proxy while the server's
//! messages still reach the client. It makes the windows between the two reproducible,
//! down to one message: the hold can begin at the first publish to a subject.
//! It can also be cut: its connections closed and new ones refused until it is restored
//! (a network link that drops, e.g. a leaf node's link to its hub).

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub url: String,
    hold: Arc<watch::Sender<bool>>,
    hold_from: Armed,
    cut: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy to the server at `upstream` (`nats://host:port` or `host:port`).
    pub async fn start(upstream: &str) -> Proxy {
        let upstream = upstream.trim_start_matches("nats://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("nats://{}", listener.local_addr().unwrap());
        let (hold, held) = watch::channel(false);
        let hold = Arc::new(hold);
        let hold_from = Arc::new(watch::Sender::new(None));
        let (cut, is_cut) = watch::channel(false);
        let accept = tokio::spawn({
            let (hold, hold_from) = (hold.clone(), hold_from.clone());
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    // Cut: the connection is closed at once, as a peer unreachable would be.
                    if *is_cut.borrow() {
                        drop(client);
                        continue;
                    }
                    let Ok(server) = TcpStream::connect(&upstream).await else { continue };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    let sends = Held { held: held.clone(), from: Some((hold_from.clone(), hold.clone())) };
                    tokio::spawn(copy(client_read, server_write, Some(sends), is_cut.clone()));
                    tokio::spawn(copy(server_read, client_write, None, is_cut.clone()));
                }
            }
        });
        Proxy { url, hold, hold_from, cut, accept }
    }

    /// Holds (true) or lets go (false) what clients send to the server.
    pub fn hold_sends(&self, hold: bool) {
        self.hold.send_replace(hold);
    }

    /// Holds what clients send from the first bytes of `pattern` on (e.g. `PUB <subject>`:
    /// a publish to that subject), once: what came before it goes through. Let go with
    /// `hold_sends(false)`; [`Proxy::holding`] tells when the hold began.
    pub fn hold_sends_from(&self, pattern: &str) {
        self.hold_from.send_replace(Some(pattern.as_bytes().to_vec()));
    }

    /// Whether what clients send is held.
    pub fn holding(&self) -> bool {
        *self.hold.borrow()
    }

    /// Closes every connection through the proxy and refuses new ones until `restore`.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Lets connections through again after `cut`.
    pub fn restore(&self) {
        self.cut.send_replace(false);
    }

    /// `host:port` of the proxy, without the scheme.
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("nats://")
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// The pattern what clients send is to be held from, if one is armed (`hold_sends_from`).
type Armed = Arc<watch::Sender<Option<Vec<u8>>>>;

/// What holds one direction of a connection: `held` (the proxy's hold) and, for what
/// clients send, the pattern to hold from (`hold_sends_from`) with the hold to set then.
struct Held {
    held: watch::Receiver<bool>,
    from: Option<(Armed, Arc<watch::Sender<bool>>)>,
}

impl Held {
    /// How much of `bytes` (after `seen`, the bytes sent before them, kept as long as a
    /// pattern can be) goes through before the hold a pattern armed begins, if it begins.
    fn before_pattern(&self, seen: &[u8], bytes: &[u8]) -> Option<usize> {
        let (trigger, hold) = self.from.as_ref()?;
        let pattern = trigger.borrow().clone()?;
        let joined = [seen, bytes].concat();
        let at = joined.windows(pattern.len()).position(|w| w == pattern.as_slice())?;
        trigger.send_replace(None);
        hold.send_replace(true);
        Some(at.saturating_sub(seen.len()))
    }
}

/// Copies `from` to `to` (waiting while `held` says so) until either end closes or the
/// proxy is cut; both halves are dropped then, which closes them.
async fn copy(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut held: Option<Held>,
    mut cut: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    // The last bytes sent, where a pattern may begin.
    let mut seen: Vec<u8> = Vec::new();
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = cut.wait_for(|cut| *cut) => return,
        };
        let mut bytes = &buf[..n];
        if let Some(held) = held.as_mut() {
            if let Some(before) = held.before_pattern(&seen, bytes) {
                if to.write_all(&bytes[..before]).await.is_err() {
                    return;
                }
                bytes = &bytes[before..];
            }
            if held.held.wait_for(|hold| !*hold).await.is_err() {
                return;
            }
            seen.extend_from_slice(bytes);
            seen.drain(..seen.len().saturating_sub(256));
        }
        if to.write_all(bytes).await.is_err() {
            return;
        }
    }
}

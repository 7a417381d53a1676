//! A TCP proxy in front of a test server whose client-to-server direction can be held:
//! what a client sends (an unsubscribe, an ack) waits in the proxy while the server's
//! messages still reach the client. It makes the windows between the two reproducible.
//! It can also be cut: its connections closed and new ones refused until it is restored
//! (a network link that drops, e.g. a leaf node's link to its hub).

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub url: String,
    hold: watch::Sender<bool>,
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
        let (cut, is_cut) = watch::channel(false);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                // Cut: the connection is closed at once, as a peer unreachable would be.
                if *is_cut.borrow() {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream).await else { continue };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(copy(client_read, server_write, Some(held.clone()), is_cut.clone()));
                tokio::spawn(copy(server_read, client_write, None, is_cut.clone()));
            }
        });
        Proxy { url, hold, cut, accept }
    }

    /// Holds (true) or lets go (false) what clients send to the server.
    pub fn hold_sends(&self, hold: bool) {
        self.hold.send_replace(hold);
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

/// Copies `from` to `to` (waiting while `held` says so) until either end closes or the
/// proxy is cut; both halves are dropped then, which closes them.
async fn copy(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut held: Option<watch::Receiver<bool>>,
    mut cut: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = cut.wait_for(|cut| *cut) => return,
        };
        if let Some(held) = held.as_mut()
            && held.wait_for(|hold| !*hold).await.is_err()
        {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

//! A TCP proxy in front of a test server whose client-to-server direction can be held:
//! what a client sends (an unsubscribe, an ack) waits in the proxy while the server's
//! messages still reach the client. It makes the windows between the two reproducible.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub url: String,
    hold: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy to the server at `upstream` (`nats://host:port`).
    pub async fn start(upstream: &str) -> Proxy {
        let upstream = upstream.trim_start_matches("nats://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("nats://{}", listener.local_addr().unwrap());
        let (hold, held) = watch::channel(false);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else { continue };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(copy(client_read, server_write, Some(held.clone())));
                tokio::spawn(copy(server_read, client_write, None));
            }
        });
        Proxy { url, hold, accept }
    }

    /// Holds (true) or lets go (false) what clients send to the server.
    pub fn hold_sends(&self, hold: bool) {
        self.hold.send_replace(hold);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn copy(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut held: Option<watch::Receiver<bool>>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
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

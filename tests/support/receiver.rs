//! A real HTTP server on 127.0.0.1 that records every request it receives, for webhook
//! tests. It answers 200, or 500 to the first `fail_first` requests. Stopped on drop.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Received {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).and_then(|v| v.to_str().ok()).map(String::from)
    }
}

pub struct Receiver {
    pub port: u16,
    requests: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Listens on `port` (0: any free one).
    pub async fn start(port: u16, fail_first: usize) -> Receiver {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests: Arc<Mutex<Vec<Received>>> = Arc::default();
        let seen = requests.clone();
        let handler = move |uri: Uri, headers: HeaderMap, body: Bytes| {
            let seen = seen.clone();
            async move {
                let mut seen = seen.lock().unwrap();
                seen.push(Received { path: uri.path().to_string(), headers, body });
                if seen.len() <= fail_first { StatusCode::INTERNAL_SERVER_ERROR } else { StatusCode::OK }
            }
        };
        let app = axum::Router::new().fallback(handler);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { port, requests, task }
    }

    /// The requests received so far, oldest first.
    pub fn received(&self) -> Vec<Received> {
        self.requests.lock().unwrap().clone()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

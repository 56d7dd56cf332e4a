//! The service on loopback for tests: start it with any scorer, send raw HTTP/1.1
//! requests (`Connection: close`), read status, headers and body, stop it gracefully.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Result;
use nlg_judge::engine::{ResultCache, Scorer};
use nlg_judge::server::{serve, ServerConfig, WorkerStats};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// A running service.
pub struct Service {
    pub addr: SocketAddr,
    pub stats: Arc<WorkerStats>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<nlg_judge::server::DrainReport>>,
}

impl Service {
    pub async fn start(scorer: Box<dyn Scorer>, config: ServerConfig) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let stats = Arc::new(WorkerStats::default());
        let task = tokio::spawn(serve(
            listener,
            scorer,
            ResultCache::in_memory().unwrap(),
            config,
            stats.clone(),
            async {
                let _ = stopped.await;
            },
        ));
        Self {
            addr,
            stats,
            stop: Some(stop),
            task,
        }
    }

    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.unwrap().unwrap();
    }

    pub async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Answer {
        request(self.addr, method, path, headers, body).await
    }

    /// POST a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Answer {
        self.request("POST", path, &[], body.to_string().as_bytes())
            .await
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.request("GET", path, &[], b"").await
    }
}

/// A response: status, headers (lower-case names) and body text.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub text: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8(response).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Answer {
        status,
        headers,
        text: body.to_string(),
    }
}

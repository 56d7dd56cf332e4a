//! A stand-in serving engine for the remote backend's tests: a loopback HTTP server whose
//! answers a test scripts (`Fn(path, body) -> (status, headers, body)`), counting the
//! requests per route, that can be stopped mid-run like an engine that dies.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde_json::Value;

/// What the script answers: status, extra headers, JSON (or any) body.
pub type Reply = (u16, Vec<(String, String)>, String);

/// The script: called for every request with its path and parsed JSON body (`Null` for
/// a GET or a body that is not JSON).
pub type Script = dyn Fn(&str, &Value) -> Reply + Send + Sync;

pub struct FakeEngine {
    /// `http://127.0.0.1:PORT/v1`.
    pub base: String,
    addr: String,
    /// Paths of the requests received, in order.
    pub seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeEngine {
    pub fn start(script: Arc<Script>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (log, halt) = (seen.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if halt.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let (script, log) = (script.clone(), log.clone());
                std::thread::spawn(move || answer(stream, &*script, &log));
            }
        });
        Self {
            base: format!("http://{addr}/v1"),
            addr,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// Requests received on `path`.
    pub fn count(&self, path: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|p| *p == path)
            .count()
    }

    /// Stop accepting and close the port (later connections are refused).
    pub fn kill(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.addr);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }
}

fn answer(stream: TcpStream, script: &Script, log: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    log.lock().unwrap().push(path.clone());
    let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (status, headers, text) = script(&path, &json);
    let mut out = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        text.len()
    );
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(&text);
    let mut stream = stream;
    let _ = stream.write_all(out.as_bytes());
}

/// A JSON answer with status 200.
pub fn ok(value: Value) -> Reply {
    (200, Vec::new(), value.to_string())
}

/// The model list of an engine serving `name`.
pub fn models(name: &str) -> Reply {
    ok(
        serde_json::json!({"object": "list", "data": [{"id": name, "object": "model", "owned_by": "test", "root": "/weights/test"}]}),
    )
}

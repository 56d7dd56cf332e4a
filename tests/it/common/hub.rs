//! A stand-in Hugging Face hub for the tests: a loopback HTTP server that answers
//! `/{repo}/resolve/{revision}/{file}` the way the hub does for hf-hub 0.4 (`ETag`,
//! `X-Repo-Commit`, ranged `206` answers with `Content-Range`), and a tiny T5-style
//! checkpoint to serve.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use nlg_judge::runtime::{FetchOptions, HubSettings, ModelCache, ModelCard};
use sha2::{Digest, Sha256};

pub const REPO: &str = "test-org/tiny-t5";
pub const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// A stand-in hub serving `files` (name -> bytes) of `REPO` at revision `COMMIT`.
pub struct StandInHub {
    pub endpoint: String,
    requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StandInHub {
    pub fn start(files: HashMap<String, Vec<u8>>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (count, halt) = (requests.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if halt.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(stream) = stream {
                    count.fetch_add(1, Ordering::SeqCst);
                    answer(stream, &files);
                }
            }
        });
        Self {
            endpoint,
            requests,
            stop,
            thread: Some(thread),
        }
    }

    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Stop serving and close the port.
    pub fn shut_down(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.endpoint.trim_start_matches("http://"));
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }
}

/// Answer one request: `GET /{REPO}/resolve/{COMMIT or main}/{file}`, honouring `Range`.
pub fn answer(stream: TcpStream, files: &HashMap<String, Vec<u8>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    reader.read_line(&mut request_line).unwrap();
    let mut range = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("range: bytes=") {
            let (start, end) = value.trim().split_once('-').unwrap();
            range = Some((start.parse::<usize>().unwrap(), end.parse::<usize>().ok()));
        }
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("");
    let file = [COMMIT, "main"].iter().find_map(|revision| {
        path.strip_prefix(&format!("/{REPO}/resolve/{revision}/"))
            .and_then(|name| files.get(name))
    });
    let mut stream = stream;
    let Some(bytes) = file else {
        let _ = stream
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return;
    };
    let etag = hex::encode(Sha256::digest(bytes));
    let (status, body, content_range) = match range {
        Some((start, end)) => {
            let end = end.unwrap_or(bytes.len() - 1).min(bytes.len() - 1);
            (
                "206 Partial Content",
                &bytes[start..=end],
                format!("Content-Range: bytes {start}-{end}/{}\r\n", bytes.len()),
            )
        }
        None => ("200 OK", &bytes[..], String::new()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\n{content_range}ETag: \"{etag}\"\r\n\
         X-Repo-Commit: {COMMIT}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
}

/// The three files of a tiny T5 checkpoint.
pub fn checkpoint_files(dir: &Path) -> HashMap<String, Vec<u8>> {
    let config = br#"{"model_type": "t5", "d_model": 8, "num_layers": 1, "n_positions": 512}"#;
    let weights_path = dir.join("model.safetensors");
    let tensor = candle_core::Tensor::arange(0f32, 16f32, &candle_core::Device::Cpu)
        .unwrap()
        .reshape((4, 4))
        .unwrap();
    candle_core::safetensors::save(
        &HashMap::from([("shared.weight".to_string(), tensor)]),
        &weights_path,
    )
    .unwrap();
    let tokenizer = br#"{"version":"1.0","truncation":null,"padding":null,
      "added_tokens":[{"id":0,"content":"<pad>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
                      {"id":1,"content":"</s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
      "normalizer":null,"pre_tokenizer":{"type":"WhitespaceSplit"},"post_processor":null,"decoder":null,
      "model":{"type":"WordLevel","vocab":{"<pad>":0,"</s>":1,"<unk>":2,"Summary":3,"A":4},"unk_token":"<unk>"}}"#;
    HashMap::from([
        ("config.json".to_string(), config.to_vec()),
        (
            "model.safetensors".to_string(),
            std::fs::read(&weights_path).unwrap(),
        ),
        ("tokenizer.json".to_string(), tokenizer.to_vec()),
    ])
}

pub fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A card for the tiny checkpoint; the weights' hash is pinned, the others are recorded at
/// first download.
pub fn card(files: &HashMap<String, Vec<u8>>) -> ModelCard {
    let text = format!(
        r#"
name = "tiny-t5"
architecture = "t5"
format = "safetensors"
context_window = 512

[[files]]
role = "config"
name = "config.json"

[[files]]
role = "tokenizer"
name = "tokenizer.json"

[[files]]
role = "weights"
name = "model.safetensors"
sha256 = "{}"

[chat]
template = "none"

[conventions]
pairwise_suffix = ""
answer_prefix = "{{item}}"
label_a = " A"
label_b = " B"
score_suffix = ""
chat = false

[[sources]]
kind = "hub"
repo = "{REPO}"
revision = "{COMMIT}"
"#,
        sha256(&files["model.safetensors"])
    );
    ModelCard::parse(&text, "tiny-t5.toml").unwrap()
}

pub fn options(cache: &Path, hub_cache: &Path, endpoint: Option<String>) -> FetchOptions {
    FetchOptions::new(
        ModelCache::new(cache),
        HubSettings::new(endpoint, hub_cache.to_path_buf()),
    )
}

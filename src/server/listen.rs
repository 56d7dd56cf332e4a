//! The connection loop of the service: every route (metrics and OpenAI-compatible ones)
//! is served through it, under the same limits and the same drain.
//!
//! - Each accepted connection is served over HTTP/1.1 by hyper with the router, in its
//!   own task. A request head must arrive within the header timeout (idle keep-alive
//!   connections are closed after it too); the body within the body timeout
//!   ([`super::http`]'s body reading).
//! - At most `max_connections` connections are served at once; one more is answered
//!   `503` with `Retry-After` and closed, so that memory stays bounded under floods
//!   (about `max_connections × (max_body_bytes + hyper's read buffer)`).
//! - When the shutdown future completes the listener is closed (new connections are
//!   refused), `draining` is set (`/healthz` answers `draining`), connections with no
//!   request in the router are closed at once (idle ones and half-open ones still sending
//!   a head; a request whose body is still arriving is answered 503), requests in the
//!   router are finished and their connections closed. Whatever is still open after the
//!   drain timeout is closed.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::ServiceExt as _;

use super::http::Limits;

/// What happened during the drain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Connections open when the drain began.
    pub connections: usize,
    /// Of these, connections with a request in the router (finished unless cut).
    pub busy: usize,
    /// Connections still open at the drain timeout, closed then.
    pub cut: usize,
    /// How long the drain took.
    pub elapsed: Duration,
}

/// The service's drain state, shared with the handlers.
#[derive(Debug, Clone)]
pub struct Drain {
    flag: Arc<AtomicBool>,
    signal: watch::Receiver<bool>,
}

impl Drain {
    /// Whether the service is draining.
    pub fn is_draining(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Completes when the drain begins.
    pub async fn started(&self) {
        let mut signal = self.signal.clone();
        let switch_gone = signal.wait_for(|draining| *draining).await.is_err();
        if switch_gone {
            // The switch is gone without a drain: the drain never begins.
            std::future::pending::<()>().await;
        }
    }
}

/// The sending side of [`Drain`].
pub struct DrainSwitch {
    flag: Arc<AtomicBool>,
    signal: watch::Sender<bool>,
}

impl DrainSwitch {
    pub fn new() -> (Self, Drain) {
        let flag = Arc::new(AtomicBool::new(false));
        let (signal, receiver) = watch::channel(false);
        (
            Self {
                flag: flag.clone(),
                signal,
            },
            Drain {
                flag,
                signal: receiver,
            },
        )
    }

    fn start(&self) {
        self.flag.store(true, Ordering::SeqCst);
        let _ = self.signal.send(true);
    }
}

/// The answer to a connection over the limit.
fn busy_answer() -> Vec<u8> {
    let body = r#"{"error":"too many connections to this service; retry later"}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Most refusals being written at once (more are closed without an answer).
const MAX_REFUSALS: usize = 64;

/// Serve `router` on `listener` until `shutdown` completes, then drain (see the module
/// header).
pub async fn run(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    switch: DrainSwitch,
    shutdown: impl Future<Output = ()>,
) -> DrainReport {
    let mut connections: JoinSet<()> = JoinSet::new();
    let busy_counts: Arc<std::sync::Mutex<Vec<Arc<AtomicUsize>>>> = Arc::default();
    let refusals = Arc::new(tokio::sync::Semaphore::new(MAX_REFUSALS));
    let (stop, stopped) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        while connections.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors and the like: wait a little, go on.
                tracing::warn!(%error, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if connections.len() >= limits.max_connections {
            tracing::warn!(
                open = connections.len(),
                "connection refused: too many open connections"
            );
            if let Ok(permit) = refusals.clone().try_acquire_owned() {
                tokio::spawn(async move {
                    refuse(stream).await;
                    drop(permit);
                });
            }
            continue;
        }
        let active = Arc::new(AtomicUsize::new(0));
        {
            let mut counts = busy_counts.lock().unwrap_or_else(|e| e.into_inner());
            counts.retain(|count| Arc::strong_count(count) > 1);
            counts.push(active.clone());
        }
        connections.spawn(connection(
            stream,
            router.clone(),
            limits.header_timeout,
            active,
            stopped.clone(),
        ));
    }
    drop(listener);
    let started = Instant::now();
    switch.start();
    while connections.try_join_next().is_some() {}
    let open = connections.len();
    let busy = busy_counts
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|count| Arc::strong_count(count) > 1 && count.load(Ordering::SeqCst) > 0)
        .count();
    let _ = stop.send(true);
    tracing::info!(
        connections = open,
        busy,
        "draining: finishing requests in progress"
    );
    let drained = tokio::time::timeout(limits.drain_timeout, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    let mut cut = 0;
    if drained.is_err() {
        cut = connections.len();
        tracing::warn!(
            cut,
            timeout_s = limits.drain_timeout.as_secs_f64(),
            "closing connections still open at the drain timeout"
        );
        connections.shutdown().await;
    }
    DrainReport {
        connections: open,
        busy,
        cut,
        elapsed: started.elapsed(),
    }
}

/// Serve one connection; on the drain signal close it at once when no request is in
/// the router, else finish that request and close.
async fn connection(
    stream: TcpStream,
    router: Router,
    header_timeout: Duration,
    active: Arc<AtomicUsize>,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let counter = active.clone();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let router = router.clone();
        let guard = ActiveGuard::enter(counter.clone());
        async move {
            let response = router.oneshot(request).await;
            drop(guard);
            response
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%error, "connection ended with an error");
            }
        }
        _ = async { stop.wait_for(|stop| *stop).await.is_ok() } => {
            if active.load(Ordering::SeqCst) == 0 {
                return; // idle or still sending a head: closed
            }
            connection.as_mut().graceful_shutdown();
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error while draining");
            }
        }
    }
}

/// Counts a request in the router while alive.
struct ActiveGuard(Arc<AtomicUsize>);

impl ActiveGuard {
    fn enter(count: Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Answer 503 to a connection over the limit, read (and drop) what the client sends for
/// a moment so that it sees the answer rather than a reset, and close.
async fn refuse(mut stream: TcpStream) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(&busy_answer()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut left: usize = 64 * 1024;
        while left > 0 {
            let n = stream.read(&mut sink).await?;
            if n == 0 {
                break;
            }
            left = left.saturating_sub(n);
        }
        std::io::Result::Ok(())
    })
    .await;
}

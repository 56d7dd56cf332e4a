//! The connection loop of the service: every route (metrics and OpenAI-compatible ones)
//! is served through it, under the same limits and the same drain.
//!
//! - Each accepted connection is served over HTTP/1.1 by hyper with the router, in its
//!   own task. A request head must arrive within the header timeout (idle keep-alive
//!   connections are closed after it too); the body within the body timeout
//!   ([`super::http`]'s body reading).
//! - With TLS ([`super::tls`]) the task first completes the TLS handshake, within the
//!   header timeout; a client that sends plain HTTP instead is answered a plain-text
//!   400 saying to use `https://` and closed, any other failed handshake is closed. So
//!   nothing but TLS is served on the port, and a failed or stalled handshake ends only
//!   its own connection.
//! - At most `max_connections` connections are served at once; one more is answered
//!   `503` with `Retry-After` and closed, so that memory stays bounded under floods
//!   (about `max_connections × (max_body_bytes + hyper's read buffer)`).
//! - When the shutdown future completes the connections already accepted by the system
//!   and waiting in the listener's queue are taken (their clients connected before the
//!   signal), the listener is closed (new connections are refused) and `draining` is set
//!   (`/healthz` answers `draining`). Then:
//!   - an idle keep-alive connection (requests served, no byte of a new one received) is
//!     closed at once;
//!   - a connection on which a request head has begun to arrive (bytes read by the
//!     service or waiting in the socket, no request in the router yet), or a new one
//!     whose client has not sent yet (it connected to send a request), gets the *grace*
//!     to complete its head: `drain_grace`, at most the header timeout and the drain
//!     timeout (default 2 s). A head that completes is served like any request, answered
//!     with `Connection: close`; otherwise the connection is closed at the end of the
//!     grace;
//!   - requests in the router are finished, answered with `Connection: close`; one whose
//!     body is still arriving gets the grace too for the rest ([`Drain::grace_over`]),
//!     then is answered 503.
//!
//!   Whatever is still open after the drain timeout is closed: the drain's bound is the
//!   drain timeout, whatever the clients do. The [`DrainReport`] counts each case.

use std::future::Future;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::ServiceExt as _;

use super::http::Limits;
use super::tls::TlsAcceptor;

/// What happened during the drain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Connections open when the drain began.
    pub connections: usize,
    /// Of these, connections the system had accepted before the signal that the service
    /// had not taken yet (its accept queue): taken at the drain, as their clients may
    /// have sent a request.
    pub from_backlog: usize,
    /// Of these, connections with a request in the router (finished unless cut).
    pub busy: usize,
    /// Of these, connections awaited for a request (none in the router yet): a request
    /// head had begun to arrive, or the connection was new and its client had not sent
    /// yet; given the grace for the head to arrive.
    pub awaited: usize,
    /// Of those, new connections on which nothing had arrived yet.
    pub awaited_silent: usize,
    /// Of the awaited, heads that completed within the grace: their requests were served.
    pub completed: usize,
    /// Of the awaited, connections closed without a request: no complete head within the
    /// grace (or the client closed, or sent a malformed head).
    pub unfinished: usize,
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
    grace: Duration,
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

    /// Completes once the drain has begun and then the grace has passed (counted from
    /// the call when the drain began earlier): the time a request already arriving is
    /// given to finish arriving.
    pub async fn grace_over(&self) {
        self.started().await;
        tokio::time::sleep(self.grace).await;
    }
}

/// The sending side of [`Drain`].
pub struct DrainSwitch {
    flag: Arc<AtomicBool>,
    signal: watch::Sender<bool>,
}

impl DrainSwitch {
    /// A switch and its drain state; `grace` is what [`Drain::grace_over`] waits.
    pub fn new(grace: Duration) -> (Self, Drain) {
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
                grace,
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

/// The grace a request head arriving at the drain gets: `drain_grace`, at most the
/// header timeout (hyper closes the connection then anyway) and the drain timeout.
pub fn head_grace(limits: &Limits) -> Duration {
    limits
        .drain_grace
        .min(limits.header_timeout)
        .min(limits.drain_timeout)
}

/// The grace a request body arriving at the drain gets (see [`Drain::grace_over`]):
/// `drain_grace`, at most the drain timeout.
pub fn body_grace(limits: &Limits) -> Duration {
    limits.drain_grace.min(limits.drain_timeout)
}

/// What the drain's connections did, counted as they go.
#[derive(Default)]
struct Tally {
    awaited: AtomicUsize,
    awaited_silent: AtomicUsize,
    completed: AtomicUsize,
    unfinished: AtomicUsize,
}

/// Serve `router` on `listener` (over TLS with `tls`) until `shutdown` completes, then
/// drain (see the module header).
pub async fn run(
    listener: TcpListener,
    router: Router,
    tls: Option<TlsAcceptor>,
    limits: Limits,
    switch: DrainSwitch,
    shutdown: impl Future<Output = ()>,
) -> DrainReport {
    let (stop, stopped) = watch::channel(false);
    let settings = Settings {
        header_timeout: limits.header_timeout,
        grace: head_grace(&limits),
    };
    let mut open = Open {
        tasks: JoinSet::new(),
        activities: Vec::new(),
        refusals: Arc::new(tokio::sync::Semaphore::new(MAX_REFUSALS)),
        tally: Arc::new(Tally::default()),
        stopped,
        router,
        tls,
        settings,
        max_connections: limits.max_connections,
    };
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _)) => open.admit(stream),
            Err(error) => {
                // Out of file descriptors and the like: wait a little, go on.
                tracing::warn!(%error, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let started = Instant::now();
    let backlog = take_backlog(listener, limits.max_connections + MAX_REFUSALS);
    let from_backlog = backlog.len();
    for stream in backlog {
        open.admit(stream);
    }
    switch.start();
    let Open {
        tasks: mut connections,
        activities,
        tally,
        ..
    } = open;
    while connections.try_join_next().is_some() {}
    let open = connections.len();
    let busy = activities
        .iter()
        .filter(|activity| {
            Arc::strong_count(activity) > 1 && activity.active.load(Ordering::SeqCst) > 0
        })
        .count();
    let _ = stop.send(true);
    tracing::info!(
        connections = open,
        from_backlog,
        busy,
        grace_s = settings.grace.as_secs_f64(),
        "draining: finishing requests in progress and heads arriving"
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
        from_backlog,
        busy,
        awaited: tally.awaited.load(Ordering::SeqCst),
        awaited_silent: tally.awaited_silent.load(Ordering::SeqCst),
        completed: tally.completed.load(Ordering::SeqCst),
        unfinished: tally.unfinished.load(Ordering::SeqCst),
        cut,
        elapsed: started.elapsed(),
    }
}

/// The connections being served, and what a new one needs.
struct Open {
    tasks: JoinSet<()>,
    /// Each connection's activity (those of ended connections are dropped as new ones
    /// come).
    activities: Vec<Arc<Activity>>,
    refusals: Arc<tokio::sync::Semaphore>,
    tally: Arc<Tally>,
    stopped: watch::Receiver<bool>,
    router: Router,
    tls: Option<TlsAcceptor>,
    settings: Settings,
    max_connections: usize,
}

impl Open {
    /// Serve `stream` in a task of its own, or answer 503 and close it when
    /// `max_connections` are open.
    fn admit(&mut self, stream: TcpStream) {
        while self.tasks.try_join_next().is_some() {}
        if self.tasks.len() >= self.max_connections {
            tracing::warn!(
                open = self.tasks.len(),
                "connection refused: too many open connections"
            );
            if let Ok(permit) = self.refusals.clone().try_acquire_owned() {
                tokio::spawn(async move {
                    refuse(stream).await;
                    drop(permit);
                });
            }
            return;
        }
        let activity = Arc::new(Activity::default());
        self.activities
            .retain(|activity| Arc::strong_count(activity) > 1);
        self.activities.push(activity.clone());
        self.tasks.spawn(connection(
            stream,
            self.router.clone(),
            self.tls.clone(),
            self.settings,
            activity,
            self.stopped.clone(),
            self.tally.clone(),
        ));
    }
}

/// Close the listener, first taking the connections the system accepted for it that
/// wait in its queue (at most `most`): their clients, connected before the signal, may
/// have sent a request already. Real `accept` calls until none is left, so that the
/// runtime not having seen the listener ready yet loses none.
fn take_backlog(listener: TcpListener, most: usize) -> Vec<TcpStream> {
    let listener = match listener.into_std() {
        Ok(listener) => listener,
        Err(error) => {
            tracing::warn!(%error, "cannot take the connections waiting to be accepted");
            return Vec::new();
        }
    };
    let mut taken = Vec::new();
    while taken.len() < most {
        match listener.accept() {
            Ok((stream, _)) => {
                match stream
                    .set_nonblocking(true)
                    .and_then(|()| TcpStream::from_std(stream))
                {
                    Ok(stream) => taken.push(stream),
                    Err(error) => tracing::warn!(%error, "cannot serve a waiting connection"),
                }
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
            Err(error) => {
                tracing::warn!(%error, "cannot accept a waiting connection");
                break;
            }
        }
    }
    taken
}

/// What every connection task needs to know.
#[derive(Debug, Clone, Copy)]
struct Settings {
    header_timeout: Duration,
    /// The grace of a head arriving at the drain ([`head_grace`]).
    grace: Duration,
}

/// What one connection has done, shared by its task, its socket and its requests.
#[derive(Debug, Default)]
struct Activity {
    /// Requests in the router now.
    active: AtomicUsize,
    /// Requests that have entered the router so far.
    entered: AtomicUsize,
    /// Bytes read from the client so far.
    received: AtomicU64,
    /// `received` when the last request left the router: bytes read after it belong to
    /// the next request.
    settled: AtomicU64,
}

impl Activity {
    /// Whether bytes of a request not yet in the router have been read.
    fn head_begun(&self) -> bool {
        self.received.load(Ordering::SeqCst) > self.settled.load(Ordering::SeqCst)
    }
}

/// Whether bytes sent by the client wait in the socket, unread (a real `recv` with
/// `MSG_PEEK`: it does not depend on the runtime having seen the socket ready).
fn bytes_waiting(stream: &TcpStream) -> bool {
    let mut byte = [MaybeUninit::<u8>::uninit(); 1];
    matches!(socket2::SockRef::from(stream).peek(&mut byte), Ok(n) if n > 0)
}

/// Serve one connection. On the drain signal: close it at once when it is idle; give a
/// head arriving (or a new connection) the grace to complete one; finish the request in
/// the router; then close.
async fn connection(
    stream: TcpStream,
    router: Router,
    tls: Option<TlsAcceptor>,
    settings: Settings,
    activity: Arc<Activity>,
    mut stop: watch::Receiver<bool>,
    tally: Arc<Tally>,
) {
    let _ = stream.set_nodelay(true);
    let stream = Arc::new(stream);
    let socket = Counted {
        stream: stream.clone(),
        activity: activity.clone(),
    };
    let socket = match tls {
        None => Socket::Plain(socket),
        Some(acceptor) => {
            match tokio::time::timeout(
                settings.header_timeout,
                handshake(&stream, acceptor, socket),
            )
            .await
            {
                Ok(Some(tls)) => Socket::Tls(Box::new(tls)),
                Ok(None) => return,
                Err(_) => {
                    tracing::info!(
                        timeout_s = settings.header_timeout.as_secs_f64(),
                        "TLS handshake not completed within the header timeout; closed"
                    );
                    return;
                }
            }
        }
    };
    let counter = activity.clone();
    let draining = stop.clone();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let router = router.clone();
        let guard = ActiveGuard::enter(counter.clone());
        let draining = draining.clone();
        async move {
            let mut response = router.oneshot(request).await;
            drop(guard);
            if *draining.borrow() {
                // The connection closes after this answer: say so to the client.
                if let Ok(response) = &mut response {
                    response
                        .headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
            }
            response
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_timeout)
        .keep_alive(true);
    let connection = builder.serve_connection(TokioIo::new(socket), service);
    tokio::pin!(connection);
    tokio::select! {
        // The connection first: what the socket holds is read before the drain decides.
        biased;
        result = connection.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%error, "connection ended with an error");
            }
            return;
        }
        _ = async { stop.wait_for(|stop| *stop).await.is_ok() } => {}
    }
    let entered = activity.entered.load(Ordering::SeqCst);
    if activity.active.load(Ordering::SeqCst) == 0 {
        let begun = activity.head_begun() || bytes_waiting(&stream);
        // A connection that has served requests and has nothing more is idle. A new
        // one is not: its client connected to send a request, and closing it now would
        // lose that request as surely as one whose head had begun.
        let new = entered == 0;
        if !begun && !new {
            return; // idle: closed
        }
        tally.awaited.fetch_add(1, Ordering::SeqCst);
        if !begun {
            tally.awaited_silent.fetch_add(1, Ordering::SeqCst);
        }
        tracing::info!(
            grace_s = settings.grace.as_secs_f64(),
            head_begun = begun,
            "draining: awaiting a request arriving"
        );
        // Serve the connection until its request enters the router, or the grace ends.
        let waited = tokio::time::timeout(
            settings.grace,
            std::future::poll_fn(|cx| match connection.as_mut().poll(cx) {
                Poll::Ready(result) => Poll::Ready(Some(result)),
                Poll::Pending if activity.entered.load(Ordering::SeqCst) > entered => {
                    Poll::Ready(None)
                }
                Poll::Pending => Poll::Pending,
            }),
        )
        .await;
        let completed = activity.entered.load(Ordering::SeqCst) > entered;
        let counter = if completed {
            &tally.completed
        } else {
            &tally.unfinished
        };
        counter.fetch_add(1, Ordering::SeqCst);
        match waited {
            Ok(None) => {} // in the router: finished below
            Ok(Some(result)) => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error while draining");
                }
                return;
            }
            Err(_) => {
                tracing::info!("draining: no complete request head within the grace; closed");
                return;
            }
        }
    }
    connection.as_mut().graceful_shutdown();
    if let Err(error) = connection.await {
        tracing::debug!(%error, "connection ended with an error while draining");
    }
}

/// The answer to plain HTTP on the TLS port (in clear: it carries nothing of the client's).
fn plain_http_answer() -> Vec<u8> {
    let body = "This port speaks HTTPS only: send the request to https:// on this port.\n";
    format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The TLS handshake on a new connection: the TLS stream, or `None` when the client sent
/// plain HTTP (answered [`plain_http_answer`]) or the handshake failed.
async fn handshake(
    stream: &TcpStream,
    acceptor: TlsAcceptor,
    mut socket: Counted,
) -> Option<tokio_rustls::server::TlsStream<Counted>> {
    // A TLS client opens with a handshake record (0x16); an HTTP client with a method.
    let mut first = [0u8; 1];
    match stream.peek(&mut first).await {
        Ok(1..) if first[0].is_ascii_alphabetic() => {
            tracing::info!("plain HTTP on the TLS port: answered 400 and closed");
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                socket.write_all(&plain_http_answer()).await?;
                socket.shutdown().await?;
                // Read what the client sent for a moment, so that it sees the answer
                // rather than a reset.
                let mut sink = [0u8; 4096];
                let mut left: usize = 64 * 1024;
                while left > 0 {
                    let n = socket.read(&mut sink).await?;
                    if n == 0 {
                        break;
                    }
                    left = left.saturating_sub(n);
                }
                io::Result::Ok(())
            })
            .await;
            return None;
        }
        Ok(1..) => {}
        _ => return None, // closed before sending
    }
    match acceptor.accept(socket).await {
        Ok(tls) => Some(tls),
        Err(error) => {
            tracing::info!(%error, "TLS handshake failed; closed");
            None
        }
    }
}

/// The connection as hyper sees it: the counted socket, or TLS over it.
enum Socket {
    Plain(Counted),
    Tls(Box<tokio_rustls::server::TlsStream<Counted>>),
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(socket) => Pin::new(socket).poll_read(cx, buf),
            Self::Tls(tls) => Pin::new(&mut **tls).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(socket) => Pin::new(socket).poll_write(cx, buf),
            Self::Tls(tls) => Pin::new(&mut **tls).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(socket) => Pin::new(socket).poll_write_vectored(cx, bufs),
            Self::Tls(tls) => Pin::new(&mut **tls).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(socket) => socket.is_write_vectored(),
            Self::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(socket) => Pin::new(socket).poll_flush(cx),
            Self::Tls(tls) => Pin::new(&mut **tls).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(socket) => Pin::new(socket).poll_shutdown(cx),
            Self::Tls(tls) => Pin::new(&mut **tls).poll_shutdown(cx),
        }
    }
}

/// The client's socket as hyper reads and writes it, counting the bytes received.
/// Shared (the connection task peeks into it at the drain), hence reads and writes
/// through `&TcpStream`.
struct Counted {
    stream: Arc<TcpStream>,
    activity: Arc<Activity>,
}

impl AsyncRead for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            ready!(self.stream.poll_read_ready(cx))?;
            match self.stream.try_read_buf(buf) {
                Ok(n) => {
                    self.activity.received.fetch_add(n as u64, Ordering::SeqCst);
                    return Poll::Ready(Ok(()));
                }
                // Readiness was stale (cleared by `try_read_buf`): wait again.
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.stream.poll_write_ready(cx))?;
            match self.stream.try_write(buf) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                written => return Poll::Ready(written),
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.stream.poll_write_ready(cx))?;
            match self.stream.try_write_vectored(bufs) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                written => return Poll::Ready(written),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(socket2::SockRef::from(&*self.stream).shutdown(std::net::Shutdown::Write))
    }
}

/// Counts a request in the router while alive.
struct ActiveGuard(Arc<Activity>);

impl ActiveGuard {
    fn enter(activity: Arc<Activity>) -> Self {
        activity.active.fetch_add(1, Ordering::SeqCst);
        activity.entered.fetch_add(1, Ordering::SeqCst);
        Self(activity)
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        let received = self.0.received.load(Ordering::SeqCst);
        self.0.settled.store(received, Ordering::SeqCst);
        self.0.active.fetch_sub(1, Ordering::SeqCst);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grace_is_capped_by_the_header_and_drain_timeouts() {
        let mut limits = Limits {
            drain_grace: Duration::from_secs(5),
            header_timeout: Duration::from_secs(3),
            drain_timeout: Duration::from_secs(4),
            ..Limits::default()
        };
        assert_eq!(head_grace(&limits), Duration::from_secs(3));
        assert_eq!(body_grace(&limits), Duration::from_secs(4));
        limits.drain_timeout = Duration::from_secs(1);
        assert_eq!(head_grace(&limits), Duration::from_secs(1));
        assert_eq!(body_grace(&limits), Duration::from_secs(1));
        limits.drain_grace = Duration::from_millis(200);
        assert_eq!(head_grace(&limits), Duration::from_millis(200));
        assert_eq!(body_grace(&limits), Duration::from_millis(200));
    }

    /// A connected pair on loopback: (client, the service's side).
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (served, _) = listener.accept().await.unwrap();
        (client, served)
    }

    #[tokio::test]
    async fn the_socket_counts_what_it_reads_and_a_peek_sees_what_waits() {
        let (mut client, served) = pair().await;
        let served = Arc::new(served);
        assert!(!bytes_waiting(&served), "nothing sent yet");
        client.write_all(b"POST / HT").await.unwrap();
        // Sent: the bytes reach the socket (a wait on an event, not a time).
        while !bytes_waiting(&served) {
            tokio::task::yield_now().await;
        }
        let activity = Arc::new(Activity::default());
        assert!(!activity.head_begun());
        let mut socket = Counted {
            stream: served.clone(),
            activity: activity.clone(),
        };
        let mut read = [0u8; 64];
        let n = socket.read(&mut read).await.unwrap();
        assert_eq!(&read[..n], &b"POST / HT"[..n]);
        assert_eq!(activity.received.load(Ordering::SeqCst), n as u64);
        assert!(
            activity.head_begun(),
            "bytes read, no request in the router"
        );
        // A request entering and leaving the router settles what was read.
        drop(ActiveGuard::enter(activity.clone()));
        assert!(!activity.head_begun());
        assert_eq!(activity.entered.load(Ordering::SeqCst), 1);
        assert_eq!(activity.active.load(Ordering::SeqCst), 0);
        // Writes go through; shutdown ends the client's reading.
        socket.write_all(b"HTTP/1.1 200 OK\r\n").await.unwrap();
        socket.shutdown().await.unwrap();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"HTTP/1.1 200 OK\r\n");
    }

    #[tokio::test]
    async fn the_drain_takes_the_connections_waiting_to_be_accepted_then_closes() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut sent = TcpStream::connect(addr).await.unwrap();
        sent.write_all(b"GET /healthz HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let _silent = TcpStream::connect(addr).await.unwrap();
        let mut taken = take_backlog(listener, 8);
        assert_eq!(taken.len(), 2);
        let client = sent.local_addr().unwrap();
        let from_sent = taken
            .iter_mut()
            .find(|stream| stream.peer_addr().unwrap() == client)
            .unwrap();
        while !bytes_waiting(from_sent) {
            tokio::task::yield_now().await;
        }
        let mut head = [0u8; 3];
        from_sent.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"GET");
        // The listener is closed: a new client is refused.
        assert!(TcpStream::connect(addr).await.is_err());
    }
}

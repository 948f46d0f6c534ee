//! `ostm-viewer watch`'s web view (docs/watch.md): an axum server that serves one page
//! (its HTML, script and style embedded in the binary) and a WebSocket per browser tab.
//! Every frame a tab gets is the SVG picture `ostm-viewer render` draws, made on the
//! server from the same drawing code ([`frame`]); [`live`] feeds tabs from a live session
//! without ever slowing its verifier, [`replay`] from a replay file through its seek index.
//!
//! Per tab: at most one frame for each `ready` (the page sends one at a display refresh
//! when none is in flight), at most one frame per [`MIN_FRAME_GAP`], and at most
//! [`TAB_QUEUE`] messages waiting to be written; a status message that finds the queue
//! full is dropped (the next one replaces it).

pub mod access;
pub mod frame;
pub mod live;
pub mod replay;
pub mod request;
pub mod yield_to_proof;

use access::{Access, Refused};
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures::stream::SplitStream;
use futures::{SinkExt, StreamExt};
use request::{Request, MAX_REQUEST};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The page, its script and its style: in the binary, nothing fetched from elsewhere.
const PAGE: &str = include_str!("page/index.html");
const SCRIPT: &str = include_str!("page/page.js");
/// The picture's patcher: keeps the page's SVG equal to each frame's, changing only what differs.
const PICTURE: &str = include_str!("page/picture.js");
const STYLE: &str = include_str!("page/page.css");

/// Messages waiting to be written to one tab, at most.
pub const TAB_QUEUE: usize = 8;
/// The shortest time between two frames to one tab (at most 125 frames a second, whatever
/// the page asks).
pub const MIN_FRAME_GAP: Duration = Duration::from_millis(8);
/// How often a tab gets the status.
pub const STATUS_EVERY: Duration = Duration::from_millis(250);
/// How many nice steps the server's threads run below the process: below the verifier
/// (`attach --verifier-nice`, 10 by default), so that drawing frames never takes the CPU
/// from verification.
pub const VIEW_NICENESS: i32 = 19;

/// What the server shows.
#[derive(Clone)]
pub enum Mode {
    Live(Arc<live::Hub>),
    Replay(Arc<replay::Source>),
}

#[derive(Clone)]
struct App {
    access: Arc<Access>,
    mode: Mode,
}

/// A bound server, not yet serving.
pub struct Server {
    /// The page's URL, to print.
    pub url: String,
    listener: tokio::net::TcpListener,
    app: Router,
}

/// The runtime the server runs on: two worker threads and blocking threads for drawing,
/// all [`VIEW_NICENESS`] nice steps down.
///
/// # Errors
/// The runtime cannot be built.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(4)
        .thread_name("ostm-web")
        .on_thread_start(|| crate::priority::lower_thread_priority(VIEW_NICENESS))
        .enable_all()
        .build()
}

/// Binds `ui` (refusing a non-loopback address without a token) and builds the routes.
///
/// # Errors
/// The sentence to print: the address is refused or cannot be bound.
pub async fn bind(ui: SocketAddr, token: Option<String>, mode: Mode) -> Result<Server, String> {
    if let Some(t) = &token {
        access::check_token(t)?;
    }
    access::check_exposure(ui, token.as_deref())?;
    let listener = tokio::net::TcpListener::bind(ui)
        .await
        .map_err(|e| format!("--ui {ui}: cannot listen: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("--ui {ui}: {e}"))?;
    let access = Access::new(bound, token);
    let url = access.url(bound);
    let app = Router::new()
        .route("/", get(page))
        .route("/page.js", get(script))
        .route("/picture.js", get(picture))
        .route("/page.css", get(style))
        .route("/ws", get(socket))
        .with_state(App {
            access: Arc::new(access),
            mode,
        });
    Ok(Server { url, listener, app })
}

impl Server {
    /// Serves until the task is dropped.
    pub async fn serve(self) {
        if let Err(e) = axum::serve(self.listener, self.app).await {
            tracing::warn!("the page's server stopped: {e}");
        }
    }
}

#[derive(serde::Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

fn header_str(h: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

fn refusal(r: Refused) -> Response {
    tracing::info!(status = r.status, "refused: {}", r.why);
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::FORBIDDEN);
    (status, format!("{}\n", r.why)).into_response()
}

/// A static asset, never cached (the binary may change under the same URL).
fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(kind)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        body,
    )
        .into_response()
}

async fn page(State(app): State<App>, headers: HeaderMap, q: Query<TokenQuery>) -> Response {
    match app
        .access
        .page(header_str(&headers, header::HOST), q.token.as_deref())
    {
        Ok(()) => asset("text/html; charset=utf-8", PAGE),
        Err(r) => refusal(r),
    }
}

/// The script and the style: the same for everyone (no token needed), on the page's host only.
fn public(app: &App, headers: &HeaderMap, kind: &'static str, body: &'static str) -> Response {
    match app.access.page(header_str(headers, header::HOST), None) {
        Err(r) if r.status != 401 => refusal(r),
        _ => asset(kind, body),
    }
}

async fn script(State(app): State<App>, headers: HeaderMap) -> Response {
    public(&app, &headers, "text/javascript; charset=utf-8", SCRIPT)
}

async fn picture(State(app): State<App>, headers: HeaderMap) -> Response {
    public(&app, &headers, "text/javascript; charset=utf-8", PICTURE)
}

async fn style(State(app): State<App>, headers: HeaderMap) -> Response {
    public(&app, &headers, "text/css; charset=utf-8", STYLE)
}

async fn socket(
    State(app): State<App>,
    headers: HeaderMap,
    q: Query<TokenQuery>,
    ws: WebSocketUpgrade,
) -> Response {
    if let Err(r) = app.access.socket(
        header_str(&headers, header::HOST),
        header_str(&headers, header::ORIGIN),
        q.token.as_deref(),
    ) {
        return refusal(r);
    }
    ws.max_message_size(MAX_REQUEST)
        .max_frame_size(MAX_REQUEST)
        .on_upgrade(move |s| tab(s, app.mode))
}

/// One tab's way out: a bounded queue written to its socket by its own task.
pub struct Tab {
    out: mpsc::Sender<Message>,
}

impl Tab {
    /// Queues `text`, waiting for room; false once the tab has gone.
    pub async fn send(&self, text: String) -> bool {
        self.out.send(Message::Text(text.into())).await.is_ok()
    }

    /// Queues `text` if there is room now; drops it otherwise (status, errors).
    pub fn offer(&self, text: String) {
        let _ = self.out.try_send(Message::Text(text.into()));
    }

    /// Queues an `error` message.
    pub fn error(&self, why: &str) {
        self.offer(request::error_message(why));
    }
}

/// The page's messages as they come: `None` when the socket closes.
pub struct Requests(SplitStream<WebSocket>);

impl Requests {
    /// The next request (or why the message was refused); `None` when the socket closed.
    /// Cancel-safe.
    pub async fn next(&mut self) -> Option<Result<Request, String>> {
        loop {
            match self.0.next().await? {
                Ok(Message::Text(t)) => return Some(request::parse(t.as_str())),
                Ok(Message::Binary(b)) => {
                    return Some(Err(format!(
                        "expected a JSON text message, found a binary message of {} bytes",
                        b.len()
                    )))
                }
                Ok(Message::Ping(_) | Message::Pong(_)) => {}
                Ok(Message::Close(_)) => return None,
                Err(e) => {
                    tracing::debug!("a tab's socket failed: {e}");
                    return None;
                }
            }
        }
    }
}

async fn tab(socket: WebSocket, mode: Mode) {
    let (mut sink, stream) = socket.split();
    let (out, mut queue) = mpsc::channel::<Message>(TAB_QUEUE);
    let writer = tokio::spawn(async move {
        while let Some(m) = queue.recv().await {
            if sink.send(m).await.is_err() {
                return;
            }
        }
        let _ = sink.close().await;
    });
    let t = Tab { out };
    let mut requests = Requests(stream);
    match mode {
        Mode::Live(hub) => live::tab(hub, &t, &mut requests).await,
        Mode::Replay(source) => replay::tab(source, &t, &mut requests).await,
    }
    drop(t);
    let _ = writer.await;
}

/// Waits so that frames to one tab are at least [`MIN_FRAME_GAP`] apart.
pub async fn pace(last: &mut tokio::time::Instant) {
    tokio::time::sleep_until(*last + MIN_FRAME_GAP).await;
    *last = tokio::time::Instant::now();
}

//! The `/metrics` endpoint both binaries serve with `--metrics ADDR` (docs/metrics.md): a
//! small HTTP/1.1 server that answers `GET /metrics` with the OpenMetrics text a
//! [`Registry`] encodes, one request per connection; and the helpers their collectors
//! encode their counters and gauges with.
//!
//! It is built so that a scraper can cost the program nothing but its own task: the
//! metrics are atomics the hot paths update and the encoding only reads; each request is
//! encoded into a string before anything is written, so no lock is held while a slow
//! scraper reads; at most [`MAX_SCRAPERS`] connections are served at once (more are closed
//! at once), and each has [`REQUEST_TIMEOUT`] to send its request and as long again to
//! take the answer. The host serves it on its own runtime ([`bind`], [`serve`]); the
//! viewer, whose verifier is a plain thread, on a thread of its own ([`Endpoint`]).

use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Connections served at once; more are closed as soon as they are accepted.
pub const MAX_SCRAPERS: usize = 16;
/// How long a connection has to send its request head, and then to take the answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request head read.
pub const MAX_REQUEST: usize = 8 * 1024;
/// The content type of the answer.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Encodes a counter `NAME_total` of value `v` (for a [`prometheus_client::collector::Collector`]).
pub fn counter(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let c = ConstCounter::new(v);
    c.encode(e.encode_descriptor(name, &format!("{help}."), None, c.metric_type())?)
}

/// Encodes a gauge `NAME` of value `v`.
pub fn gauge<V: EncodeGaugeValue + std::fmt::Debug + Send + Sync + 'static>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: V,
) -> std::fmt::Result {
    let g = ConstGauge::new(v);
    g.encode(e.encode_descriptor(name, &format!("{help}."), None, g.metric_type())?)
}

/// `--metrics ADDR`: `HOST:PORT`, or a port alone (loopback, 127.0.0.1:PORT).
///
/// # Errors
/// Neither a port nor a socket address.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse::<SocketAddr>().map_err(|_| {
        format!("expected PORT or HOST:PORT for the metrics endpoint (e.g. 9464 or 127.0.0.1:9464), found `{s}`")
    })
}

/// Binds `addr` for [`serve`].
///
/// # Errors
/// The address cannot be bound, in a sentence naming it.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| bind_error(addr, &e))
}

/// The endpoint on a thread of its own, with a one-thread runtime, for a program whose
/// work runs on plain threads: bound by [`Endpoint::start`], served until dropped.
#[derive(Debug)]
pub struct Endpoint {
    addr: SocketAddr,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Endpoint {
    /// Binds `addr` at once (so a bad address is an error before anything is announced)
    /// and serves `registry` there on the thread `ostm-metrics`.
    ///
    /// # Errors
    /// The address cannot be bound, or the thread or its runtime cannot be made.
    pub fn start(addr: SocketAddr, registry: Registry) -> Result<Endpoint, String> {
        let listener = std::net::TcpListener::bind(addr).map_err(|e| bind_error(addr, &e))?;
        let bound = listener.local_addr().map_err(|e| bind_error(addr, &e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| bind_error(addr, &e))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the metrics endpoint: {e}"))?;
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ostm-metrics".into())
            .spawn(move || {
                rt.block_on(async move {
                    match TcpListener::from_std(listener) {
                        Ok(l) => serve(l, Arc::new(registry), stopped).await,
                        Err(e) => tracing::warn!("metrics: cannot serve on {bound}: {e}"),
                    }
                });
            })
            .map_err(|e| format!("cannot start the metrics endpoint: {e}"))?;
        Ok(Endpoint {
            addr: bound,
            stop,
            thread: Some(thread),
        })
    }

    /// The bound address (port 0 resolved).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Endpoint {
    /// Stops accepting and closes the connections being served.
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn bind_error(addr: SocketAddr, e: &std::io::Error) -> String {
    format!("cannot listen for metrics on {addr}: {e} (choose another --metrics address)")
}

/// Serves `registry` on `listener` until `stop`.
pub async fn serve(listener: TcpListener, registry: Arc<Registry>, stop: CancellationToken) {
    let slots = Arc::new(Semaphore::new(MAX_SCRAPERS));
    loop {
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => return,
            acc = listener.accept() => match acc {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("metrics: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "metrics: {MAX_SCRAPERS} scrapers already connected; closed");
            continue;
        };
        let registry = registry.clone();
        tokio::spawn(async move {
            if let Err(e) = answer(stream, &registry).await {
                tracing::debug!(%peer, "metrics: {e}");
            }
            drop(slot);
        });
    }
}

/// Reads one request head and answers it.
async fn answer(mut stream: TcpStream, registry: &Registry) -> Result<(), String> {
    let mut head = Vec::with_capacity(512);
    let read = async {
        let mut buf = [0u8; 1024];
        loop {
            let n = stream.read(&mut buf).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("closed before a whole request".to_string());
            }
            head.extend_from_slice(&buf[..n]);
            if head.windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok(());
            }
            if head.len() > MAX_REQUEST {
                return Err(format!("a request head over {MAX_REQUEST} bytes"));
            }
        }
    };
    tokio::time::timeout(REQUEST_TIMEOUT, read)
        .await
        .map_err(|_| format!("no whole request within {REQUEST_TIMEOUT:?}"))??;
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split(' ');
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => {
            let mut body = String::new();
            prometheus_client::encoding::text::encode(&mut body, registry)
                .map_err(|e| format!("cannot encode the metrics: {e}"))?;
            ("200 OK", CONTENT_TYPE, body)
        }
        ("GET", "/") => (
            "200 OK",
            "text/plain; charset=utf-8",
            "the metrics are at /metrics (docs/metrics.md)\n".to_string(),
        ),
        ("GET", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: the metrics are at /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET is served\n".to_string(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    };
    tokio::time::timeout(REQUEST_TIMEOUT, write)
        .await
        .map_err(|_| format!("the answer was not taken within {REQUEST_TIMEOUT:?}"))?
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::parse_addr;

    #[test]
    fn a_port_alone_is_loopback() {
        assert_eq!(parse_addr("9464").unwrap().to_string(), "127.0.0.1:9464");
        assert_eq!(parse_addr("0.0.0.0:1").unwrap().to_string(), "0.0.0.0:1");
        assert_eq!(parse_addr("[::1]:9").unwrap().to_string(), "[::1]:9");
        assert!(parse_addr("localhost")
            .unwrap_err()
            .contains("PORT or HOST:PORT"));
    }
}

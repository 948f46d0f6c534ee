//! Moving a NATS client off a server that serves nothing while its connection stays up
//! (docs/fan-out.md, "Servers and failover"): the publisher machine decides when
//! (`serve::publish::Event::MoveServer`); this has the client reconnect, the server it
//! left tried last.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::warn;

/// The server a client was last asked to move from, shared with the client's
/// reconnection callback.
#[derive(Debug, Clone, Default)]
pub struct Avoid(Arc<Mutex<Option<(String, u16)>>>);

impl Avoid {
    /// `options`, whose reconnections (once asked to move) try the least failed of the
    /// client's servers (those given and those the cluster told of), the one moved from
    /// last among equals; at once when it has not failed yet.
    pub fn options(&self, options: async_nats::ConnectOptions) -> async_nats::ConnectOptions {
        let avoid = self.0.clone();
        options.reconnect_to_server_callback(move |servers, _| {
            let avoid = avoid.lock().ok().and_then(|a| a.clone());
            async move { avoid.and_then(|a| next_server(&servers, &a)) }
        })
    }

    /// Has `client` (made with [`Avoid::options`]) reconnect, the server it is on tried
    /// last; returns that server (`HOST:PORT`). Nothing when it is not connected: it is
    /// reconnecting already.
    pub fn move_from(&self, client: &async_nats::Client) -> Option<String> {
        if client.connection_state() != async_nats::connection::State::Connected {
            return None;
        }
        let info = client.server_info();
        let server = format!("{}:{}", info.host, info.port);
        if let Ok(mut a) = self.0.lock() {
            *a = Some((info.host, info.port));
        }
        let c = client.clone();
        tokio::spawn(async move {
            if let Err(e) = c.force_reconnect().await {
                warn!("cannot reconnect to NATS: {e}");
            }
        });
        Some(server)
    }
}

/// The server to reconnect to when moving from `avoid`.
fn next_server(
    servers: &[async_nats::Server],
    avoid: &(String, u16),
) -> Option<async_nats::ReconnectToServer> {
    let s = servers
        .iter()
        .min_by_key(|s| (s.failed_attempts, is_server(&s.addr, avoid)))?;
    Some(async_nats::ReconnectToServer {
        addr: s.addr.clone(),
        delay: (s.failed_attempts == 0).then_some(Duration::ZERO),
    })
}

/// `addr` is the server at `(host, port)` (its INFO's; a server listening on every
/// address names none).
fn is_server(addr: &async_nats::ServerAddr, (host, port): &(String, u16)) -> bool {
    addr.port() == *port && (addr.host() == host || matches!(host.as_str(), "0.0.0.0" | "::" | ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(url: &str, failed: usize) -> async_nats::Server {
        async_nats::Server {
            addr: url.parse().unwrap(),
            failed_attempts: failed,
            did_connect: false,
            is_discovered: false,
            last_error: None,
        }
    }

    #[test]
    fn the_server_moved_from_is_tried_last_among_equals() {
        let avoid = ("127.0.0.1".to_string(), 4222);
        let pick = |s: &[async_nats::Server]| next_server(s, &avoid).map(|r| r.addr.port());
        let pool = [
            server("nats://127.0.0.1:4222", 0),
            server("nats://127.0.0.1:4223", 0),
            server("nats://127.0.0.1:4224", 0),
        ];
        assert_eq!(pick(&pool), Some(4223));
        let pool = [
            server("nats://127.0.0.1:4222", 0),
            server("nats://127.0.0.1:4223", 1),
            server("nats://127.0.0.1:4224", 0),
        ];
        assert_eq!(pick(&pool), Some(4224));
        let pool = [
            server("nats://127.0.0.1:4222", 0),
            server("nats://127.0.0.1:4223", 1),
            server("nats://127.0.0.1:4224", 1),
        ];
        assert_eq!(pick(&pool), Some(4222), "back to it once each other failed");
        let any = ("0.0.0.0".to_string(), 4223);
        let pool = [
            server("nats://127.0.0.1:4223", 0),
            server("nats://127.0.0.1:4222", 0),
        ];
        assert_eq!(next_server(&pool, &any).map(|r| r.addr.port()), Some(4222));
    }
}

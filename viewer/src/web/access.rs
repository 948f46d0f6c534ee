//! Who may use the page (docs/watch.md, "Access"): the `--ui` address and the rule that a
//! non-loopback one needs `--ui-token`; the `Host`, `Origin` and token checks every request
//! passes before it is served.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use subtle::ConstantTimeEq;

/// The longest `--ui-token`.
pub const MAX_TOKEN_LEN: usize = 255;

/// Parses `--ui`: `HOST:PORT`, `HOST` (port 0: a free port), an IPv6 address in brackets
/// with or without a port; a name is resolved (`localhost`).
///
/// # Errors
/// The address does not parse or resolve.
pub fn parse_ui(text: &str) -> Result<SocketAddr, String> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, 0));
    }
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Ok(a);
    }
    let bare = (text.starts_with('[') && text.ends_with(']')) || !text.contains(':');
    let with_port = if bare {
        format!("{text}:0")
    } else {
        text.to_string()
    };
    with_port
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            format!("--ui {text}: expected HOST[:PORT] (an IP address or a name that resolves)")
        })
}

/// Checks `--ui-token`: 1 to 255 characters from `A-Z a-z 0-9 . _ ~ -`, so that it goes
/// into the page's URL as it is.
///
/// # Errors
/// A sentence naming what is wrong.
pub fn check_token(token: &str) -> Result<(), String> {
    if token.is_empty() || token.len() > MAX_TOKEN_LEN {
        return Err(format!(
            "--ui-token: expected 1 to {MAX_TOKEN_LEN} characters, found {}",
            token.len()
        ));
    }
    if let Some((at, c)) = token
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '~' | '-')))
    {
        return Err(format!(
            "--ui-token: expected only A-Z a-z 0-9 . _ ~ -, found {c:?} at byte {at}"
        ));
    }
    Ok(())
}

/// Refuses a non-loopback `--ui` without a token.
///
/// # Errors
/// The sentence to print.
pub fn check_exposure(addr: SocketAddr, token: Option<&str>) -> Result<(), String> {
    if !addr.ip().is_loopback() && token.is_none() {
        return Err(format!(
            "--ui {addr} is not a loopback address: anyone who can reach it could watch; give --ui-token TOKEN (or OSTM_UI_TOKEN) to require a token"
        ));
    }
    Ok(())
}

/// What every request is checked against.
#[derive(Debug, Clone)]
pub struct Access {
    /// `Host` values the page is served under, when the server is on loopback (`None`:
    /// any, on a non-loopback address, where the token guards it).
    hosts: Option<Vec<String>>,
    token: Option<String>,
}

/// Why a request was refused (the status and the body sent back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub why: String,
}

fn refused(status: u16, why: String) -> Refused {
    Refused { status, why }
}

impl Access {
    /// The checks for a server bound to `bound`.
    pub fn new(bound: SocketAddr, token: Option<String>) -> Access {
        let hosts = bound.ip().is_loopback().then(|| {
            let port = bound.port();
            let mut h = vec![
                format!("127.0.0.1:{port}"),
                format!("localhost:{port}"),
                format!("[::1]:{port}"),
            ];
            let own = bound.to_string();
            if !h.contains(&own) {
                h.push(own);
            }
            h
        });
        Access { hosts, token }
    }

    /// The page's URL for a person to open: the bound address, with the token.
    pub fn url(&self, bound: SocketAddr) -> String {
        match &self.token {
            Some(t) => format!("http://{bound}/?token={t}"),
            None => format!("http://{bound}/"),
        }
    }

    /// Checks a request for the page: its `Host` (on loopback, one of the loopback names:
    /// a page of another site that a DNS name points here is refused) and the token.
    ///
    /// # Errors
    /// Why the request is refused.
    pub fn page(&self, host: Option<&str>, token: Option<&str>) -> Result<(), Refused> {
        self.host(host)?;
        self.token(token)
    }

    /// Checks a WebSocket upgrade: as [`Access::page`], and its `Origin` must be this
    /// server's own page (`http://` and the request's `Host`), so that no page of another
    /// site can use a viewer running on someone's machine.
    ///
    /// # Errors
    /// Why the upgrade is refused.
    pub fn socket(
        &self,
        host: Option<&str>,
        origin: Option<&str>,
        token: Option<&str>,
    ) -> Result<(), Refused> {
        let host = self.host(host)?;
        let want = format!("http://{host}");
        match origin {
            Some(o) if o.eq_ignore_ascii_case(&want) => {}
            Some(o) => {
                return Err(refused(
                    403,
                    format!("expected a WebSocket from this viewer's own page (Origin {want}), found Origin {o}"),
                ))
            }
            None => {
                return Err(refused(
                    403,
                    format!("expected a WebSocket from this viewer's own page (Origin {want}), found no Origin header"),
                ))
            }
        }
        self.token(token)
    }

    fn host<'a>(&self, host: Option<&'a str>) -> Result<&'a str, Refused> {
        let Some(host) = host else {
            return Err(refused(400, "expected a Host header".into()));
        };
        match &self.hosts {
            Some(allowed) if !allowed.iter().any(|a| a.eq_ignore_ascii_case(host)) => Err(refused(
                421,
                format!(
                    "expected Host {} (this viewer serves loopback only), found {host}",
                    allowed.join(" or ")
                ),
            )),
            _ => Ok(host),
        }
    }

    fn token(&self, given: Option<&str>) -> Result<(), Refused> {
        let Some(want) = &self.token else {
            return Ok(());
        };
        match given {
            Some(g) if bool::from(g.as_bytes().ct_eq(want.as_bytes())) => Ok(()),
            Some(_) => Err(refused(
                401,
                "the token does not match: open the URL the viewer printed".into(),
            )),
            None => Err(refused(
                401,
                "this viewer requires its token (?token=...): open the URL the viewer printed"
                    .into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ui_addresses_parse_with_a_free_port_when_none_is_given() {
        assert_eq!(parse_ui("127.0.0.1"), Ok(at("127.0.0.1:0")));
        assert_eq!(parse_ui("127.0.0.1:8080"), Ok(at("127.0.0.1:8080")));
        assert_eq!(parse_ui("[::1]"), Ok(at("[::1]:0")));
        assert_eq!(parse_ui("::1"), Ok(at("[::1]:0")));
        assert_eq!(parse_ui("[::1]:9"), Ok(at("[::1]:9")));
        assert!(parse_ui("localhost").unwrap().ip().is_loopback());
        assert!(parse_ui("127.0.0.1:99999").is_err());
        assert!(parse_ui("no such host.invalid:1").is_err());
    }

    #[test]
    fn a_non_loopback_address_needs_a_token() {
        assert!(check_exposure(at("127.0.0.1:0"), None).is_ok());
        assert!(check_exposure(at("[::1]:0"), None).is_ok());
        let e = check_exposure(at("0.0.0.0:80"), None).unwrap_err();
        assert!(e.contains("not a loopback address"), "{e}");
        assert!(check_exposure(at("0.0.0.0:80"), Some("t")).is_ok());
        assert!(check_exposure(at("10.1.2.3:80"), None).is_err());
    }

    #[test]
    fn tokens_are_url_safe_and_bounded() {
        assert!(check_token("abc-DEF_0.9~").is_ok());
        assert!(check_token(&"x".repeat(255)).is_ok());
        assert!(check_token(&"x".repeat(256)).is_err());
        assert!(check_token("").is_err());
        let e = check_token("ab&c").unwrap_err();
        assert!(e.contains("'&' at byte 2"), "{e}");
    }

    #[test]
    fn sockets_come_only_from_the_own_page_with_the_token() {
        let a = Access::new(at("127.0.0.1:4000"), None);
        let h = Some("127.0.0.1:4000");
        assert!(a.socket(h, Some("http://127.0.0.1:4000"), None).is_ok());
        assert!(a
            .socket(Some("localhost:4000"), Some("http://localhost:4000"), None)
            .is_ok());
        // Another site's page, a missing Origin, another port, a rebound name.
        for (host, origin) in [
            (h, Some("http://evil.example")),
            (h, None),
            (h, Some("http://127.0.0.1:4001")),
            (h, Some("http://localhost:4000")),
            (Some("evil.example:4000"), Some("http://evil.example:4000")),
            (None, Some("http://127.0.0.1:4000")),
        ] {
            let e = a.socket(host, origin, None).unwrap_err();
            assert!(e.status >= 400, "{host:?} {origin:?}: {e:?}");
        }
        assert_eq!(
            a.page(Some("evil.example:4000"), None).unwrap_err().status,
            421
        );
        let t = Access::new(at("0.0.0.0:4000"), Some("s3cret".into()));
        let host = Some("sim.example:4000");
        let origin = Some("http://sim.example:4000");
        assert!(t.socket(host, origin, Some("s3cret")).is_ok());
        assert_eq!(
            t.socket(host, origin, Some("s3cre")).unwrap_err().status,
            401
        );
        assert_eq!(t.socket(host, origin, None).unwrap_err().status, 401);
        assert_eq!(
            t.socket(host, Some("http://other:4000"), Some("s3cret"))
                .unwrap_err()
                .status,
            403
        );
        assert!(t.page(host, Some("s3cret")).is_ok());
        assert_eq!(t.page(host, None).unwrap_err().status, 401);
        assert_eq!(
            t.url(at("0.0.0.0:4000")),
            "http://0.0.0.0:4000/?token=s3cret"
        );
    }
}

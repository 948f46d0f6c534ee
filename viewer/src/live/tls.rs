//! TLS for the viewer (rustls through tokio-rustls): trust a CA file or the system's
//! roots, check the host's name, explain a refusal.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_rustls::TlsConnector;

/// The viewer's TLS options.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// Connect with TLS, trusting the system's root certificates unless --tls-ca.
    #[arg(long)]
    pub tls: bool,
    /// Trust the CA certificates in this PEM file (implies --tls).
    #[arg(long, value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// The name the host's certificate must carry (default: the host part of ADDR).
    #[arg(long, value_name = "NAME")]
    pub tls_name: Option<String>,
}

/// What a TLS connection needs: the connector and the name to check.
#[derive(Clone)]
pub struct Tls {
    pub connector: TlsConnector,
    pub name: ServerName<'static>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tls({:?})", self.name)
    }
}

impl TlsArgs {
    /// The TLS set-up for `addr`, or `None` without --tls and --tls-ca.
    ///
    /// # Errors
    /// The CA file cannot be read or holds no certificate, the system has no roots, or
    /// the name is not a DNS name or IP address.
    pub fn build(&self, addr: &str) -> Result<Option<Tls>, String> {
        if !self.tls && self.tls_ca.is_none() {
            return Ok(None);
        }
        let mut roots = rustls::RootCertStore::empty();
        match &self.tls_ca {
            Some(ca) => {
                for cert in read_certs(ca)? {
                    roots.add(cert).map_err(|e| {
                        format!("{}: not a usable CA certificate: {e}", ca.display())
                    })?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                for cert in found.certs {
                    let _ = roots.add(cert);
                }
                if roots.is_empty() {
                    return Err(
                        "no system root certificates found: name the host's CA with --tls-ca"
                            .into(),
                    );
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let host = match &self.tls_name {
            Some(n) => n.clone(),
            None => host_part(addr).to_string(),
        };
        let name = ServerName::try_from(host.clone())
            .map_err(|_| format!("`{host}` is not a name a TLS certificate can carry"))?;
        Ok(Some(Tls {
            connector: TlsConnector::from(Arc::new(config)),
            name,
        }))
    }
}

/// `HOST` of `HOST:PORT` (`[::1]:7878` gives `::1`).
fn host_part(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read the CA file {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cannot read the CA file {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// How a host's operator makes a certificate viewers accept.
const HOW_TO_MAKE_ONE: &str =
    "`ostm-host cert create-host NAME...` makes one, docs/tls.md says how";

/// A sentence for a failed TLS handshake with `addr`: what went wrong and what to do,
/// then rustls's own words.
pub fn explain(addr: &str, name: &ServerName<'_>, e: &std::io::Error) -> String {
    let rustls_error = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    let why = match rustls_error {
        Some(r) => format!("{} (rustls: {r})", rustls_sentence(r, name)),
        None => format!("{e} (does the host serve TLS? try without --tls)"),
    };
    format!("TLS handshake with {addr} failed: {why}")
}

/// What a rustls handshake error means for whoever runs the viewer, and what to do.
fn rustls_sentence(e: &rustls::Error, name: &ServerName<'_>) -> String {
    use rustls::{CertificateError as C, Error};
    let Error::InvalidCertificate(c) = e else {
        return match e {
            Error::InvalidMessage(_) | Error::InappropriateMessage { .. } => {
                "the host did not answer in TLS (does it serve TLS? try without --tls)".into()
            }
            other => other.to_string(),
        };
    };
    match c {
        C::UnknownIssuer | C::BadSignature => "the host's certificate is not signed by a CA this viewer trusts: pass the certificate of the CA that signed it with --tls-ca (the host's operator has it: ostm-host cert create-ca writes it as ca.pem)".to_string(),
        C::NotValidForName => format!(
            "the host's certificate is not valid for {}: dial the host by a name its certificate carries, or pass that name with --tls-name",
            name.to_str()
        ),
        C::NotValidForNameContext { presented, .. } => format!(
            "the host's certificate is not valid for {} (it names {}): dial the host by one of those, pass one with --tls-name, or have the host's operator make a certificate for {0}: {HOW_TO_MAKE_ONE}",
            name.to_str(),
            if presented.is_empty() {
                "no DNS name or IP address".to_string()
            } else {
                presented.iter().map(|p| plain_name(p)).collect::<Vec<_>>().join(", ")
            }
        ),
        C::Expired => format!(
            "the host's certificate has expired (or this machine's clock is wrong): its operator must make a new one: {HOW_TO_MAKE_ONE}"
        ),
        C::ExpiredContext { time, not_after } => format!(
            "the host's certificate has expired: it was valid until {}, and it is now {} here (is this machine's clock right?): its operator must make a new one: {HOW_TO_MAKE_ONE}",
            utc(not_after.as_secs()),
            utc(time.as_secs())
        ),
        C::NotValidYet => "the host's certificate is not valid yet: check this machine's clock and the host's".into(),
        C::NotValidYetContext { time, not_before } => format!(
            "the host's certificate is not valid yet: it is valid from {}, and it is now {} here; check this machine's clock and the host's",
            utc(not_before.as_secs()),
            utc(time.as_secs())
        ),
        C::InvalidPurpose | C::InvalidPurposeContext { .. } => format!(
            "the host's certificate is not one for a TLS server (its extendedKeyUsage lacks serverAuth): its operator must make one for a server: {HOW_TO_MAKE_ONE}"
        ),
        C::Other(other) if matches!(
            other.0.downcast_ref::<webpki::Error>(),
            Some(webpki::Error::CaUsedAsEndEntity)
        ) => format!(
            "the host serves a CA certificate as its own, and TLS clients refuse a CA certificate as a server's: its operator must serve a host certificate signed by that CA: {HOW_TO_MAKE_ONE}; `openssl req -x509` makes a CA certificate unless given `-addext basicConstraints=critical,CA:FALSE`"
        ),
        _ => format!("the host's certificate was refused: {c:?}"),
    }
}

/// `localhost` for rustls's `DnsName("localhost")`, `127.0.0.1` for `IpAddress(127.0.0.1)`.
fn plain_name(presented: &str) -> &str {
    presented
        .strip_prefix("DnsName(\"")
        .and_then(|n| n.strip_suffix("\")"))
        .or_else(|| {
            presented
                .strip_prefix("IpAddress(")
                .and_then(|n| n.strip_suffix(')'))
        })
        .unwrap_or(presented)
}

/// RFC 3339 in UTC (`2027-01-31T12:00:00Z`) for seconds since the Unix epoch.
fn utc(secs: u64) -> String {
    i64::try_from(secs)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{secs} s after 1970"))
}

#[cfg(test)]
mod tests {
    use super::{host_part, plain_name};

    #[test]
    fn the_names_a_certificate_presents_read_plainly() {
        assert_eq!(plain_name("DnsName(\"localhost\")"), "localhost");
        assert_eq!(plain_name("IpAddress(127.0.0.1)"), "127.0.0.1");
        assert_eq!(plain_name("Unsupported(0x81)"), "Unsupported(0x81)");
    }

    #[test]
    fn the_host_part_of_an_address() {
        assert_eq!(host_part("localhost:7878"), "localhost");
        assert_eq!(host_part("127.0.0.1:1"), "127.0.0.1");
        assert_eq!(host_part("[::1]:7878"), "::1");
    }
}

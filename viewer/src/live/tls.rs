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

/// A sentence for a failed TLS handshake with `addr`.
pub fn explain(addr: &str, name: &ServerName<'_>, e: &std::io::Error) -> String {
    use rustls::{CertificateError, Error};
    let why = match e.get_ref().and_then(|inner| inner.downcast_ref::<Error>()) {
        Some(Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        )) => {
            "the host's certificate is not signed by a CA this viewer trusts (name its CA with --tls-ca)".to_string()
        }
        Some(Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => format!(
            "the host's certificate is not valid for {} (--tls-name names another)",
            name.to_str()
        ),
        Some(Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        )) => "the host's certificate has expired".to_string(),
        Some(Error::InvalidCertificate(
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
        )) => "the host's certificate is not valid yet".to_string(),
        Some(Error::InvalidMessage(_)) | Some(Error::InappropriateMessage { .. }) => {
            "the host did not answer in TLS (does it serve TLS? try without --tls)".to_string()
        }
        Some(other) => other.to_string(),
        None => format!("{e} (does the host serve TLS? try without --tls)"),
    };
    format!("TLS handshake with {addr} failed: {why}")
}

#[cfg(test)]
mod tests {
    use super::host_part;

    #[test]
    fn the_host_part_of_an_address() {
        assert_eq!(host_part("localhost:7878"), "localhost");
        assert_eq!(host_part("127.0.0.1:1"), "127.0.0.1");
        assert_eq!(host_part("[::1]:7878"), "::1");
    }
}

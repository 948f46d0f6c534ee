//! TLS for the host (rustls through tokio-rustls): the certificate chain and key from PEM
//! files, the same protocol inside.
//!
//! Before serving, the host checks its own certificate as a viewer will (docs/tls.md): a
//! certificate that every viewer would refuse stops the host at startup with a sentence
//! that says what to do, rather than every viewer failing its handshake later.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

/// Days before its end from which a certificate still in force is warned about.
pub const EXPIRY_WARNING_DAYS: i64 = 30;

/// How to make a certificate that viewers accept, said after each refusal.
const HOW_TO_MAKE_ONE: &str =
    "make one with `ostm-host cert create-ca` and `ostm-host cert create-host NAME...` (docs/tls.md)";

/// An acceptor for the certificate chain in `cert` and the private key in `key` (PEM),
/// once the first certificate of the chain has passed [`check_leaf`] at the current time.
///
/// # Errors
/// A file cannot be read, holds no certificate or key, the certificate is one that
/// viewers refuse, or the key is not the certificate's.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("cannot read the certificate {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cannot read the certificate {}: {e}", cert.display()))?;
    let Some(leaf) = chain.first() else {
        return Err(format!(
            "{} holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)",
            cert.display()
        ));
    };
    let now = x509_parser::time::ASN1Time::now().timestamp();
    if let Some(warning) =
        check_leaf(leaf, now).map_err(|why| format!("{}: {why}", cert.display()))?
    {
        tracing::warn!("{}: {warning}", cert.display());
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        format!(
            "cannot read the private key {}: {e} (expected a PEM private key, e.g. -----BEGIN PRIVATE KEY-----)",
            key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => format!(
                "the private key {} is not the key of the certificate {} (their public keys differ): pass the key that was made with this certificate (rustls: {e})",
                key.display(),
                cert.display()
            ),
            _ => format!(
                "the certificate {} and key {} do not make a TLS identity: {e}",
                cert.display(),
                key.display()
            ),
        })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Checks a server certificate (DER) as a viewer will, at `now` (seconds since the Unix
/// epoch): it must not be a CA certificate (basicConstraints CA:TRUE), must be in force,
/// must name at least one DNS name or IP address in subjectAltName (viewers match only
/// those, never the common name), and an extendedKeyUsage, if any, must allow TLS server
/// authentication.
///
/// # Returns
/// A warning when the certificate ends within [`EXPIRY_WARNING_DAYS`].
///
/// # Errors
/// The sentence saying why viewers would refuse it and what to do.
pub fn check_leaf(der: &[u8], now: i64) -> Result<Option<String>, String> {
    let (_, cert) = X509Certificate::from_der(der)
        .map_err(|e| format!("the certificate is not valid X.509 DER inside its PEM: {e}"))?;
    let bad_extension = |e: x509_parser::error::X509Error| {
        format!("the certificate's extensions are malformed: {e}")
    };
    if let Some(bc) = cert.basic_constraints().map_err(bad_extension)? {
        if bc.value.ca {
            return Err(format!(
                "this is a CA certificate (basicConstraints CA:TRUE), and viewers refuse a CA certificate as a server's (rustls: CaUsedAsEndEntity): {HOW_TO_MAKE_ONE}, or with openssl add `-addext basicConstraints=critical,CA:FALSE` (`openssl req -x509` makes a CA certificate unless told)"
            ));
        }
    }
    let (from, until) = (
        cert.validity().not_before.timestamp(),
        cert.validity().not_after.timestamp(),
    );
    if now < from {
        return Err(format!(
            "the certificate is not valid yet: it is valid from {} and it is now {} (check this machine's clock, or make a new one: {HOW_TO_MAKE_ONE})",
            utc(from),
            utc(now)
        ));
    }
    if now > until {
        return Err(format!(
            "the certificate expired on {} (it is now {}): viewers refuse it; {HOW_TO_MAKE_ONE}",
            utc(until),
            utc(now)
        ));
    }
    let names_a_host = cert
        .subject_alternative_name()
        .map_err(bad_extension)?
        .is_some_and(|san| {
            san.value
                .general_names
                .iter()
                .any(|n| matches!(n, GeneralName::DNSName(_) | GeneralName::IPAddress(_)))
        });
    if !names_a_host {
        return Err(format!(
            "the certificate names no DNS name or IP address (subjectAltName), and viewers check the host's name only against those, never against the common name; {HOW_TO_MAKE_ONE}, or with openssl add `-addext subjectAltName=DNS:NAME,IP:ADDRESS`"
        ));
    }
    if let Some(eku) = cert.extended_key_usage().map_err(bad_extension)? {
        if !eku.value.server_auth && !eku.value.any {
            return Err(format!(
                "the certificate's extendedKeyUsage does not allow TLS server authentication (serverAuth), and viewers refuse it; {HOW_TO_MAKE_ONE}"
            ));
        }
    }
    let left = until - now;
    Ok((left < EXPIRY_WARNING_DAYS * 86_400).then(|| {
        format!(
            "the certificate expires on {} (in {} days): make a new one before then ({HOW_TO_MAKE_ONE})",
            utc(until),
            left / 86_400
        )
    }))
}

/// RFC 3339 in UTC (`2027-01-31T12:00:00Z`) for seconds since the Unix epoch.
pub fn utc(secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{secs} s after 1970"))
}

#[cfg(test)]
mod tests {
    use super::{check_leaf, utc};
    use rcgen::{
        date_time_ymd, BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    };

    /// 2025-06-01T00:00:00Z.
    const NOW: i64 = 1_748_736_000;

    /// A self-signed certificate for localhost, valid in 2025, `edit`ed first.
    fn cert(edit: impl FnOnce(&mut CertificateParams)) -> Vec<u8> {
        let mut p = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        p.not_before = date_time_ymd(2025, 1, 1);
        p.not_after = date_time_ymd(2026, 1, 1);
        edit(&mut p);
        p.self_signed(&KeyPair::generate().unwrap())
            .unwrap()
            .der()
            .to_vec()
    }

    #[track_caller]
    fn refused(der: &[u8], want: &str) {
        let why = check_leaf(der, NOW).unwrap_err();
        assert!(why.contains(want), "{want}: {why}");
        assert!(why.contains("ostm-host cert create-host"), "{why}");
    }

    #[test]
    fn a_certificate_viewers_accept_passes() {
        assert_eq!(check_leaf(&cert(|_| {}), NOW), Ok(None));
        let explicit = cert(|p| {
            p.is_ca = IsCa::ExplicitNoCa;
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        });
        assert_eq!(check_leaf(&explicit, NOW), Ok(None));
    }

    #[test]
    fn each_certificate_viewers_refuse_is_refused_in_a_sentence() {
        refused(
            &cert(|p| p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained)),
            "this is a CA certificate (basicConstraints CA:TRUE)",
        );
        refused(
            &cert(|p| p.not_after = date_time_ymd(2025, 5, 1)),
            "the certificate expired on 2025-05-01T00:00:00Z (it is now 2025-06-01T00:00:00Z)",
        );
        refused(
            &cert(|p| p.not_before = date_time_ymd(2025, 7, 1)),
            "not valid yet: it is valid from 2025-07-01T00:00:00Z",
        );
        refused(
            &cert(|p| p.subject_alt_names.clear()),
            "names no DNS name or IP address",
        );
        refused(
            &cert(|p| p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth]),
            "does not allow TLS server authentication",
        );
        let why = check_leaf(b"not DER", NOW).unwrap_err();
        assert!(why.contains("not valid X.509"), "{why}");
    }

    #[test]
    fn a_certificate_near_its_end_is_served_with_a_warning() {
        let soon = cert(|p| p.not_after = date_time_ymd(2025, 6, 11));
        let warning = check_leaf(&soon, NOW).unwrap().unwrap();
        assert!(
            warning.contains("expires on 2025-06-11T00:00:00Z (in 10 days)"),
            "{warning}"
        );
    }

    #[test]
    fn times_read_as_rfc_3339_in_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(NOW), "2025-06-01T00:00:00Z");
    }
}

//! TLS for the host (rustls through tokio-rustls): the certificate chain and key from PEM
//! files, the same protocol inside.
//!
//! Before serving, the host checks its own certificate as a viewer will (docs/tls.md): a
//! certificate that every viewer would refuse stops the host at startup with a sentence
//! that says what to do, rather than every viewer failing its handshake later. While it
//! runs it warns as the certificate's end nears and after it, and reloads the certificate
//! and key on SIGHUP (renewal without a restart).

use crate::unpoisoned::unpoisoned;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use tokio_rustls::TlsAcceptor;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

/// Days before its end from which a certificate still in force is warned about.
pub const EXPIRY_WARNING_DAYS: i64 = 30;

/// How to make a certificate that viewers accept, said after each refusal.
const HOW_TO_MAKE_ONE: &str =
    "make one with `ostm-host cert create-ca` and `ostm-host cert create-host NAME...` (docs/tls.md)";

/// The host's TLS: the acceptor new connections go through, and the identity it serves
/// (reloaded on SIGHUP, watched for its end).
#[derive(Clone)]
pub struct HostTls {
    pub acceptor: TlsAcceptor,
    pub identity: Arc<Identity>,
}

/// An acceptor for the certificate chain in `cert` and the private key in `key` (PEM),
/// once the first certificate of the chain has passed [`check_leaf`] at the current time
/// (a certificate near its end is served with a warning in the log). The certificate is
/// chosen per handshake from the [`Identity`], so [`Identity::reload`] changes what new
/// connections are served without a restart.
///
/// # Errors
/// A file cannot be read, holds no certificate or key, the certificate is one that
/// viewers refuse, or the key is not the certificate's.
pub fn acceptor(cert: &Path, key: &Path) -> Result<HostTls, String> {
    let loaded = load(cert, key, unix_now())?;
    if let Some(warning) = &loaded.warning {
        tracing::warn!("{}: {warning}", cert.display());
    }
    let identity = Arc::new(Identity {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        served: RwLock::new(Arc::new(loaded.served)),
        changed: tokio::sync::Notify::new(),
        refusals: Mutex::new(Refusals::default()),
    });
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(identity.clone());
    Ok(HostTls {
        acceptor: TlsAcceptor::from(Arc::new(config)),
        identity,
    })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Seconds since the Unix epoch, now.
fn unix_now() -> i64 {
    x509_parser::time::ASN1Time::now().timestamp()
}

/// How often at most a refused handshake because of an expired certificate is logged at
/// warn (the others in between are counted in the next warning).
pub const REFUSAL_WARNING_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// How often a certificate within [`EXPIRY_WARNING_DAYS`] of its end, or past it, is
/// warned about while the host serves it.
const EXPIRY_WARNING_EVERY_SECS: i64 = 86_400;

/// A certificate and key that passed the checks, as served.
#[derive(Debug)]
struct Served {
    certified: Arc<CertifiedKey>,
    /// The end of the certificate's validity (seconds since the Unix epoch).
    not_after: i64,
}

/// What [`load`] read: the identity to serve, and a warning when its end is near.
struct Loaded {
    served: Served,
    warning: Option<String>,
}

/// The refused handshakes since the last warning about them.
type Refusals = crate::tally::Tally;

/// The certificate and key the host serves, read from its two files; a reload swaps them
/// for new connections while connections already made go on.
#[derive(Debug)]
pub struct Identity {
    cert: PathBuf,
    key: PathBuf,
    served: RwLock<Arc<Served>>,
    /// Told on every reload that replaced the certificate (the expiry watch starts over).
    changed: tokio::sync::Notify,
    refusals: Mutex<Refusals>,
}

impl ResolvesServerCert for Identity {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.served().certified.clone())
    }
}

impl Identity {
    fn served(&self) -> Arc<Served> {
        unpoisoned(self.served.read()).clone()
    }

    /// Reads the certificate and key files again (on SIGHUP) and, when they pass the
    /// checks made at startup, serves them to every new connection, logging so at info
    /// (and warning when the new certificate's end is near); when they do not, logs the
    /// sentence at error and goes on serving the certificate loaded before.
    pub fn reload(&self) {
        let old = self.served();
        match load(&self.cert, &self.key, unix_now()) {
            Ok(loaded) => {
                *unpoisoned(self.served.write()) = Arc::new(loaded.served);
                *unpoisoned(self.refusals.lock()) = Refusals::default();
                self.changed.notify_one();
                tracing::info!(
                    cert = %self.cert.display(),
                    key = %self.key.display(),
                    not_after = %utc(self.served().not_after),
                    "reloaded the certificate {} and key {}: new connections are served it (valid until {})",
                    self.cert.display(),
                    self.key.display(),
                    utc(self.served().not_after)
                );
                if let Some(warning) = loaded.warning {
                    tracing::warn!("{}: {warning}", self.cert.display());
                }
            }
            Err(why) => tracing::error!(
                cert = %self.cert.display(),
                key = %self.key.display(),
                "cannot reload the certificate and key: {why}; still serving the certificate loaded before (valid until {})",
                utc(old.not_after)
            ),
        }
    }

    /// Logs a refused TLS handshake: at warn, once per [`REFUSAL_WARNING_EVERY`] with the
    /// number refused since, when the certificate served has expired or the viewer said
    /// so (alert `certificate_expired`); at info otherwise.
    pub fn refused(&self, e: &std::io::Error) {
        let served = self.served();
        let expired_alert = e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .is_some_and(|r| {
                matches!(
                    r,
                    rustls::Error::AlertReceived(rustls::AlertDescription::CertificateExpired)
                )
            });
        let now = unix_now();
        if !expired_alert && now <= served.not_after {
            tracing::info!("refused: TLS handshake failed: {e}");
            return;
        }
        let mut refusals = unpoisoned(self.refusals.lock());
        let Some(refused) = refusals.add(1, REFUSAL_WARNING_EVERY) else {
            return;
        };
        let why = if now > served.not_after {
            format!(
                "the certificate {} expired on {} (it is now {}) and viewers refuse it",
                self.cert.display(),
                utc(served.not_after),
                utc(now)
            )
        } else {
            format!(
                "viewers say the certificate {} has expired, though it is valid until {} here (it is now {}): check their clocks and this one's, or",
                self.cert.display(),
                utc(served.not_after),
                utc(now)
            )
        };
        tracing::warn!(
            refused,
            cert = %self.cert.display(),
            not_after = %utc(served.not_after),
            "refused {refused} TLS handshakes since the last warning (the last: {e}): {why}; {}",
            self.renew()
        );
    }

    /// What to do about a certificate at or near its end.
    fn renew(&self) -> String {
        format!(
            "make a new one (`ostm-host cert create-host NAME...`, docs/tls.md), put it in {} and its key in {}, then send the host SIGHUP (`kill -HUP PID`) to serve it without a restart",
            self.cert.display(),
            self.key.display()
        )
    }

    /// Warns while the host runs about the certificate it serves: once a day from
    /// [`EXPIRY_WARNING_DAYS`] before its end (as at startup), and at its end; a reload
    /// starts the watch over with the new certificate. Runs until dropped.
    pub async fn watch_expiry(self: Arc<Self>) {
        loop {
            let served = self.served();
            let now = unix_now();
            let wait = if now <= served.not_after {
                (served.not_after - now + 1).min(EXPIRY_WARNING_EVERY_SECS)
            } else {
                EXPIRY_WARNING_EVERY_SECS
            };
            let wait = std::time::Duration::from_secs(u64::try_from(wait).unwrap_or(1));
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = self.changed.notified() => continue,
            }
            let now = unix_now();
            let left = served.not_after - now;
            if left < 0 {
                tracing::warn!(
                    cert = %self.cert.display(),
                    not_after = %utc(served.not_after),
                    "{}: the certificate the host serves expired on {} (it is now {}): viewers refuse it; {}",
                    self.cert.display(),
                    utc(served.not_after),
                    utc(now),
                    self.renew()
                );
            } else if left < EXPIRY_WARNING_DAYS * 86_400 {
                tracing::warn!(
                    cert = %self.cert.display(),
                    not_after = %utc(served.not_after),
                    "{}: {}",
                    self.cert.display(),
                    expires_soon(served.not_after, now)
                );
            }
        }
    }
}

/// SIGHUP, watched from now on: it reloads the certificate and key rather than ending
/// the process (register it before the host announces its address).
///
/// # Errors
/// The signal cannot be watched.
pub fn hangup() -> Result<tokio::signal::unix::Signal, String> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| format!("cannot watch SIGHUP (which reloads the certificate): {e}"))
}

/// Reloads `identity` on each SIGHUP and watches its end ([`Identity::watch_expiry`])
/// until `stop` is cancelled.
pub fn spawn_upkeep(
    identity: Arc<Identity>,
    mut hangup: tokio::signal::unix::Signal,
    stop: tokio_util::sync::CancellationToken,
) {
    let watched = identity.clone();
    tokio::spawn(async move {
        let reloads = async {
            while hangup.recv().await.is_some() {
                identity.reload();
            }
        };
        tokio::select! {
            () = reloads => {}
            () = watched.watch_expiry() => {}
            () = stop.cancelled() => {}
        }
    });
}

/// Reads the chain in `cert` and the key in `key` (PEM) and checks them at `now`.
fn load(cert: &Path, key: &Path, now: i64) -> Result<Loaded, String> {
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
    let warning = check_leaf(leaf, now).map_err(|why| format!("{}: {why}", cert.display()))?;
    let not_after = X509Certificate::from_der(leaf)
        .map(|(_, c)| c.validity().not_after.timestamp())
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        format!(
            "cannot read the private key {}: {e} (expected a PEM private key, e.g. -----BEGIN PRIVATE KEY-----)",
            key.display()
        )
    })?;
    let certified = CertifiedKey::from_der(chain, private, &provider()).map_err(|e| match e {
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
    Ok(Loaded {
        served: Served {
            certified: Arc::new(certified),
            not_after,
        },
        warning,
    })
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
    Ok((until - now < EXPIRY_WARNING_DAYS * 86_400).then(|| expires_soon(until, now)))
}

/// The warning about a certificate that ends at `until` within [`EXPIRY_WARNING_DAYS`] of
/// `now`.
fn expires_soon(until: i64, now: i64) -> String {
    let days = (until - now) / 86_400;
    format!(
        "the certificate expires on {} (in {days} day{}): make a new one before then ({HOW_TO_MAKE_ONE}) and send the host SIGHUP to serve it without a restart",
        utc(until),
        if days == 1 { "" } else { "s" }
    )
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

    /// Handshakes refused after the certificate's end are warned about once per
    /// [`super::REFUSAL_WARNING_EVERY`], the ones in between counted for the next warning;
    /// a reload starts the count over.
    #[test]
    fn refusals_after_the_end_are_warned_about_once_a_minute_and_counted() {
        use super::{provider, Identity, Refusals, Served};
        use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
        use std::sync::{Arc, Mutex, RwLock};
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        p.not_before = date_time_ymd(2020, 1, 1);
        p.not_after = date_time_ymd(2021, 1, 1);
        let der = p.self_signed(&key).unwrap().der().clone();
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let certified = rustls::sign::CertifiedKey::from_der(vec![der], private, &provider());
        let identity = Identity {
            cert: "host.pem".into(),
            key: "host.key".into(),
            served: RwLock::new(Arc::new(Served {
                certified: Arc::new(certified.unwrap()),
                not_after: 1_609_459_200,
            })),
            changed: tokio::sync::Notify::new(),
            refusals: Mutex::new(Refusals::default()),
        };
        let e = std::io::Error::other("alert received");
        identity.refused(&e);
        let first = identity.refusals.lock().unwrap().warned;
        assert!(first.is_some());
        identity.refused(&e);
        identity.refused(&e);
        let r = identity.refusals.lock().unwrap();
        assert_eq!((r.warned, r.since), (first, 2), "counted, not warned again");
    }

    #[test]
    fn times_read_as_rfc_3339_in_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(NOW), "2025-06-01T00:00:00Z");
    }
}

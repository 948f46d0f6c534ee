//! TLS as a person sets it up (docs/tls.md), with the real binaries on 127.0.0.1:
//! `ostm-host cert` and the working openssl recipes give a host that viewers verify; the
//! host refuses at startup, in a sentence, a certificate every viewer would refuse (a CA
//! certificate, as `openssl req -x509` makes by default; a key that is not its own; no
//! subjectAltName; not valid yet; expired in live_tls.rs); and the viewer explains each
//! handshake refusal (a CA used as a server's, expired, not valid yet, a wrong name, an
//! unknown issuer) in a sentence that says what to do, rustls's words after it. For the
//! viewer's sentences the certificates are served by a bare rustls server in this test,
//! since the host refuses to serve them.

mod live_support;

use live_support::*;
use rcgen::{date_time_ymd, BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `openssl ARGS` in `dir`; it must succeed.
#[track_caller]
fn openssl(dir: &Path, args: &[&str]) {
    let o = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl is not installed: apt-get install openssl (scripts/test does)");
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `ostm-host ARGS` run to its end.
fn host_cmd(args: &[&str]) -> std::process::Output {
    run(Command::new(host_bin()).args(args))
}

/// `serve` with this certificate and key is refused at startup: exit 2 before listening,
/// and stderr holds every one of `want`.
#[track_caller]
fn host_refuses(cert: &Path, key: &Path, want: &[&str]) {
    let o = host_cmd(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        s(cert),
        "--tls-key",
        s(key),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        !stdout(&o).contains("listening"),
        "refused before listening: {}",
        stdout(&o)
    );
    for w in want {
        assert!(stderr(&o).contains(w), "{w}: {}", stderr(&o));
    }
}

/// A host serving this certificate verifies `steps` steps for a viewer that trusts `ca`
/// (by IP address, and by the name `localhost`).
#[track_caller]
fn verifies(cert: &Path, key: &Path, ca: &Path) {
    let host = Host::start(&[
        "--rate",
        "500",
        "--status-ms",
        "0",
        "--tls-cert",
        s(cert),
        "--tls-key",
        s(key),
    ]);
    for extra in [&[][..], &["--tls-name", "localhost"][..]] {
        let out = viewer(
            &[
                &["check", &host.addr, "--steps", "30", "--tls-ca", s(ca)][..],
                extra,
            ]
            .concat(),
        );
        assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
        assert!(
            stdout(&out).starts_with("ok: verified 30 of the "),
            "{}",
            stdout(&out)
        );
    }
}

/// The keys of an object, sorted.
fn keys(doc: &serde_json::Value) -> Vec<&str> {
    let mut k: Vec<&str> = doc
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    k.sort_unstable();
    k
}

#[test]
fn both_cert_commands_json_names_every_file_as_docs_tls_md_lists() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    // The CA's key kept apart from the directory (--ca-key), as docs/tls.md suggests.
    let ca_key = dir.path().join("private").join("ca.key");
    let (c, k) = (s(&certs), s(&ca_key));
    let o = host_cmd(&[
        "cert",
        "create-ca",
        "--certs-dir",
        c,
        "--ca-key",
        k,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let ca: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(keys(&ca), ["ca_cert", "ca_key", "event", "not_after"]);
    let o = host_cmd(&[
        "cert",
        "create-host",
        "localhost",
        "--certs-dir",
        c,
        "--ca-key",
        k,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let host: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(
        keys(&host),
        [
            "ca_cert",
            "ca_key",
            "cert",
            "event",
            "key",
            "names",
            "not_after"
        ]
    );
    for doc in [&ca, &host] {
        assert_eq!(doc["event"], "wrote");
        assert_eq!(doc["ca_cert"], s(&certs.join("ca.pem")));
        assert_eq!(doc["ca_key"], k);
    }
    assert_eq!(host["cert"], s(&certs.join("host.pem")));
    assert_eq!(host["key"], s(&certs.join("host.key")));
}

#[test]
fn the_cert_command_makes_a_ca_and_a_host_certificate_viewers_accept() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let c = s(&certs);
    // The host's certificate needs the CA first, and says so.
    let o = host_cmd(&["cert", "create-host", "localhost", "--certs-dir", c]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("make the CA first"), "{}", stderr(&o));

    let o = host_cmd(&["cert", "create-ca", "--certs-dir", c]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("--tls-ca"), "{}", stdout(&o));
    let o = host_cmd(&[
        "cert",
        "create-host",
        "localhost",
        "127.0.0.1",
        "--certs-dir",
        c,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(doc["names"], serde_json::json!(["localhost", "127.0.0.1"]));
    // The keys are their owner's alone.
    use std::os::unix::fs::PermissionsExt;
    for key in ["ca.key", "host.key"] {
        let mode = std::fs::metadata(certs.join(key))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{key}");
    }
    // Nothing is overwritten unless asked.
    let o = host_cmd(&["cert", "create-ca", "--certs-dir", c]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--overwrite"), "{}", stderr(&o));

    verifies(
        &certs.join("host.pem"),
        &certs.join("host.key"),
        &certs.join("ca.pem"),
    );
}

#[test]
fn the_openssl_recipes_of_the_docs_make_certificates_viewers_accept() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // One self-signed certificate that is not a CA's: the viewer trusts it directly.
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "self.key",
            "-out",
            "self.pem",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-addext",
            "basicConstraints=critical,CA:FALSE",
        ],
    );
    verifies(
        &d.join("self.pem"),
        &d.join("self.key"),
        &d.join("self.pem"),
    );

    // A CA, and a host certificate it signs (RSA, as openssl's own default).
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=my ostm CA",
        ],
    );
    openssl(
        d,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "host.key",
            "-out",
            "host.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(
        d.join("host.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "host.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "host.ext",
            "-out",
            "host.pem",
        ],
    );
    verifies(&d.join("host.pem"), &d.join("host.key"), &d.join("ca.pem"));
}

#[test]
fn the_host_refuses_at_startup_a_certificate_viewers_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The first recipe anyone tries: openssl marks it a CA.
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "k.pem",
            "-out",
            "c.pem",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
    );
    host_refuses(
        &d.join("c.pem"),
        &d.join("k.pem"),
        &[
            "this is a CA certificate",
            "-addext basicConstraints=critical,CA:FALSE",
            "ostm-host cert create-host",
        ],
    );
    // A key that is not the certificate's.
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "good.key",
            "-out",
            "good.pem",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-addext",
            "basicConstraints=critical,CA:FALSE",
        ],
    );
    openssl(d, &["genpkey", "-algorithm", "RSA", "-out", "other.key"]);
    host_refuses(
        &d.join("good.pem"),
        &d.join("other.key"),
        &["other.key is not the key of the certificate", "good.pem"],
    );
    // No subjectAltName: viewers match names only there.
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "cn.key",
            "-out",
            "cn.pem",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "basicConstraints=critical,CA:FALSE",
        ],
    );
    host_refuses(
        &d.join("cn.pem"),
        &d.join("cn.key"),
        &["names no DNS name or IP address", "subjectAltName"],
    );
    // Not valid yet.
    let ca = Ca::new(d);
    let (cert, key) = ca.leaf(d, "future", |p| {
        p.not_before = date_time_ymd(2100, 1, 1);
        p.not_after = date_time_ymd(2101, 1, 1);
    });
    host_refuses(&cert, &key, &["not valid yet", "valid from 2100-01-01"]);
    // The good one, for contrast, is served.
    verifies(
        &d.join("good.pem"),
        &d.join("good.key"),
        &d.join("good.pem"),
    );
}

/// A CA made with rcgen, written as `ca.pem`.
struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: PathBuf,
}

impl Ca {
    fn new(dir: &Path) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "ostm test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        let pem = dir.join("ca.pem");
        std::fs::write(&pem, cert.pem()).unwrap();
        Ca {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// A leaf for localhost and 127.0.0.1 signed by this CA, `edit`ed first, written as
    /// `FILE.crt` and `FILE.key`.
    fn leaf(
        &self,
        dir: &Path,
        file: &str,
        edit: impl FnOnce(&mut CertificateParams),
    ) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        edit(&mut params);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (c, k) = (
            dir.join(format!("{file}.crt")),
            dir.join(format!("{file}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

/// A bare TLS server on 127.0.0.1 that serves `cert` with `key` whatever they are (no
/// check), completing or failing each handshake; it lives as long as the test process.
fn tls_server(cert: &Path, key: &Path) -> String {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for sock in listener.incoming() {
            let Ok(mut sock) = sock else { continue };
            let config = config.clone();
            std::thread::spawn(move || {
                let _ = sock.set_read_timeout(Some(LIMIT));
                let mut conn = rustls::ServerConnection::new(config).unwrap();
                while conn.is_handshaking() {
                    if conn.complete_io(&mut sock).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// The viewer's handshake with `addr`, trusting `ca` (and naming `extra`), fails with
/// exit 2 and a line holding every one of `want` and rustls's own words after them.
#[track_caller]
fn viewer_refuses(addr: &str, ca: &Path, extra: &[&str], want: &[&str]) {
    let out = viewer(
        &[
            &["check", addr, "--steps", "5", "--tls-ca", s(ca)][..],
            extra,
        ]
        .concat(),
    );
    assert_eq!(code(&out), 2, "{}{}", stdout(&out), stderr(&out));
    let said = stdout(&out);
    assert!(said.contains("TLS handshake with"), "{said}");
    for w in want {
        assert!(said.contains(w), "{w}: {said}");
    }
    assert!(
        said.contains("(rustls: invalid peer certificate"),
        "rustls's words after the sentence: {said}"
    );
}

#[test]
fn the_viewer_explains_each_refused_certificate_and_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A CA certificate served as the host's (the recipe, as openssl makes it).
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "k.pem",
            "-out",
            "c.pem",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
    );
    let addr = tls_server(&d.join("c.pem"), &d.join("k.pem"));
    viewer_refuses(
        &addr,
        &d.join("c.pem"),
        &[],
        &[
            "the host serves a CA certificate as its own",
            "ostm-host cert create-host",
            "basicConstraints=critical,CA:FALSE",
            "CaUsedAsEndEntity",
        ],
    );

    let ca = Ca::new(d);
    // Expired.
    let (cert, key) = ca.leaf(d, "old", |p| {
        p.not_before = date_time_ymd(2020, 1, 1);
        p.not_after = date_time_ymd(2021, 1, 1);
    });
    let addr = tls_server(&cert, &key);
    viewer_refuses(
        &addr,
        &ca.pem,
        &[],
        &[
            "the host's certificate has expired: it was valid until 2021-01-01T00:00:00Z",
            "must make a new one",
        ],
    );
    // Not valid yet.
    let (cert, key) = ca.leaf(d, "future", |p| {
        p.not_before = date_time_ymd(2100, 1, 1);
        p.not_after = date_time_ymd(2101, 1, 1);
    });
    let addr = tls_server(&cert, &key);
    viewer_refuses(
        &addr,
        &ca.pem,
        &[],
        &[
            "not valid yet: it is valid from 2100-01-01T00:00:00Z",
            "clock",
        ],
    );
    // A good certificate, but the wrong name, or a CA the viewer does not trust.
    let (cert, key) = ca.leaf(d, "good", |_| {});
    let addr = tls_server(&cert, &key);
    viewer_refuses(
        &addr,
        &ca.pem,
        &["--tls-name", "elsewhere.example"],
        &[
            "not valid for elsewhere.example (it names localhost, 127.0.0.1)",
            "--tls-name",
        ],
    );
    viewer_refuses(
        &addr,
        &cert,
        &[],
        &["not signed by a CA this viewer trusts", "--tls-ca"],
    );
}

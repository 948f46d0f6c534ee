//! TLS and secrets with the real binaries on 127.0.0.1: certificates made here (rcgen).
//! A good certificate attaches and verifies; a wrong CA, a wrong name, a plaintext viewer
//! against a TLS host and a TLS viewer against a plaintext host are each refused with a
//! clear message and exit 2; the host refuses to serve an expired certificate. A running
//! host reloads its certificate and key on SIGHUP (keeping the old ones when the new files
//! are bad), warns as its certificate's end nears and when it comes, and warns of the
//! handshakes refused after it. Tokens come from `--token-file` and `OSTM_TOKEN` on both
//! ends and are refused past 255 bytes.

mod live_support;

use live_support::*;
use rcgen::{date_time_ymd, BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A CA, written as `ca.pem` in `dir`, that signs leaves.
struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: PathBuf,
}

fn ca(dir: &Path, name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("ostm test {name}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    let pem = dir.join(format!("{name}.pem"));
    std::fs::write(&pem, cert.pem()).unwrap();
    Ca {
        issuer: Issuer::new(params, key),
        pem,
    }
}

/// A leaf for `names` signed by `ca`, written as `NAME.crt` and `NAME.key`; `expired`
/// dates it in the past.
fn leaf(dir: &Path, ca: &Ca, file: &str, names: &[&str], expired: bool) -> (PathBuf, PathBuf) {
    leaf_with(dir, ca, file, names, |params| {
        if expired {
            params.not_before = date_time_ymd(2020, 1, 1);
            params.not_after = date_time_ymd(2021, 1, 1);
        }
    })
}

/// A leaf for `names` signed by `ca`, its parameters `edit`ed first.
fn leaf_with(
    dir: &Path,
    ca: &Ca,
    file: &str,
    names: &[&str],
    edit: impl FnOnce(&mut CertificateParams),
) -> (PathBuf, PathBuf) {
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    edit(&mut params);
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    let (c, k) = (
        dir.join(format!("{file}.crt")),
        dir.join(format!("{file}.key")),
    );
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `check ADDR --steps 5 ARGS` is refused: exit 2, and its line holds every one of `want`.
#[track_caller]
fn refused(addr: &str, args: &[&str], want: &[&str]) {
    let out = viewer(&[&["check", addr, "--steps", "5"][..], args].concat());
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    for w in want {
        assert!(stdout(&out).contains(w), "{w}: {}", stdout(&out));
    }
}

fn tls_host(cert: &Path, key: &Path) -> Host {
    Host::start(&[
        "--rate",
        "500",
        "--status-ms",
        "0",
        "--tls-cert",
        s(cert),
        "--tls-key",
        s(key),
    ])
}

#[test]
fn a_good_certificate_attaches_and_verifies_and_bad_ones_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good_ca = ca(d, "ca");
    let other_ca = ca(d, "other-ca");
    let (cert, key) = leaf(d, &good_ca, "host", &["localhost", "127.0.0.1"], false);
    let host = tls_host(&cert, &key);

    // By IP address (the certificate names 127.0.0.1), and by name.
    let out = viewer(&[
        "check",
        &host.addr,
        "--steps",
        "100",
        "--tls-ca",
        s(&good_ca.pem),
    ]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(
        stdout(&out).starts_with("ok: verified 100 of the "),
        "{}",
        stdout(&out)
    );
    let out = viewer(&[
        "check",
        &host.addr,
        "--steps",
        "50",
        "--tls-ca",
        s(&good_ca.pem),
        "--tls-name",
        "localhost",
    ]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));

    // A CA the viewer does not trust.
    refused(
        &host.addr,
        &["--tls-ca", s(&other_ca.pem)],
        &["not signed by a CA this viewer trusts"],
    );
    // A name the certificate does not carry.
    refused(
        &host.addr,
        &[
            "--tls-ca",
            s(&good_ca.pem),
            "--tls-name",
            "elsewhere.example",
        ],
        &["not valid for elsewhere.example"],
    );
    // A plaintext viewer against the TLS host: told the host serves TLS (it is an ostm
    // host), and what to pass.
    refused(
        &host.addr,
        &[],
        &[
            &format!(
                "{} serves TLS (it answered with a TLS record: 15 03 0",
                host.addr
            ),
            "connect with --tls, and with --tls-ca CA.pem too when a private CA signed",
        ],
    );
    let out = viewer(&["check", &host.addr, "--steps", "5"]);
    assert!(
        !stdout(&out).contains("not an ostm host"),
        "{}",
        stdout(&out)
    );
    drop(host);

    // An expired certificate: the host refuses to serve it (the viewer's own sentence for
    // one is in live_tls_recipes.rs, against a TLS server that serves anything).
    let (cert, key) = leaf(d, &good_ca, "old", &["127.0.0.1"], true);
    let o = run(Command::new(host_bin()).args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        s(&cert),
        "--tls-key",
        s(&key),
    ]));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("expired on 2021-01-01"),
        "{}",
        stderr(&o)
    );

    // A TLS viewer against a plaintext host.
    let host = Host::start(&["--rate", "500", "--status-ms", "0"]);
    refused(
        &host.addr,
        &["--tls-ca", s(&good_ca.pem)],
        &["TLS handshake with", "failed"],
    );
}

#[test]
fn a_host_on_a_non_loopback_address_needs_a_token_and_tls() {
    let host = |args: &[&str]| {
        run(Command::new(host_bin())
            .args(["serve", "--listen", "0.0.0.0:0", "--steps", "1"])
            .args(args)
            .env_remove("OSTM_TOKEN"))
    };
    let o = host(&[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("a token is required"));
    let o = host(&["--token", "t"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("TLS is required") && err.contains("--allow-plaintext"),
        "{err}"
    );
}

#[test]
fn tokens_come_from_a_file_or_the_environment_and_are_at_most_255_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "s3cret\n").unwrap();
    // The host takes its token from OSTM_TOKEN; the viewer from --token-file.
    let host = Host::start_env(
        &["--rate", "500", "--status-ms", "0"],
        &[("OSTM_TOKEN", "s3cret")],
    );
    let out = viewer(&[
        "check",
        &host.addr,
        "--steps",
        "20",
        "--token-file",
        s(&file),
    ]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    // And the viewer from OSTM_TOKEN.
    let out = run(Command::new(viewer_bin())
        .args(["check", &host.addr, "--steps", "20"])
        .env("OSTM_TOKEN", "s3cret"));
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    // Without it: refused by the host.
    let out = run(Command::new(viewer_bin())
        .args(["check", &host.addr, "--steps", "20"])
        .env_remove("OSTM_TOKEN"));
    assert_eq!(code(&out), 2);
    assert!(stdout(&out).contains("bad-token"), "{}", stdout(&out));
    drop(host);

    // 256 bytes: refused at startup on both ends, before anything is listened or sent.
    let long = "x".repeat(256);
    let o =
        run(Command::new(host_bin()).args(["serve", "--listen", "127.0.0.1:0", "--token", &long]));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("256 bytes; a token is at most 255 bytes"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run(Command::new(viewer_bin())
        .args(["attach", "127.0.0.1:9"])
        .env("OSTM_TOKEN", &long));
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("the token from OSTM_TOKEN is 256 bytes"),
        "{}",
        stderr(&o)
    );
}

/// A log line's level and message.
fn logged(v: &serde_json::Value, level: &str, has: &[&str]) -> bool {
    let msg = v["fields"]["message"].as_str().unwrap_or_default();
    v["level"] == level && has.iter().all(|h| msg.contains(h))
}

/// `ostm-host ARGS`, which must succeed.
#[track_caller]
fn host_ok(args: &[&str]) {
    let o = run(Command::new(host_bin()).args(args));
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
}

/// `check ADDR` trusting `ca` verifies a few steps.
#[track_caller]
fn verified(addr: &str, ca: &Path) {
    let out = viewer(&["check", addr, "--steps", "5", "--tls-ca", s(ca)]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
}

#[test]
fn a_running_host_reloads_its_certificate_on_sighup_and_warns_of_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (old, new, live) = (d.join("old"), d.join("new"), d.join("live"));
    // The first certificate, for one day: a host serves it with a warning.
    host_ok(&[
        "cert",
        "create-ca",
        "--certs-dir",
        s(&old),
        "--name",
        "old CA",
    ]);
    host_ok(&[
        "cert",
        "create-host",
        "127.0.0.1",
        "--certs-dir",
        s(&old),
        "--days",
        "1",
    ]);
    std::fs::create_dir(&live).unwrap();
    let (cert, key) = (live.join("host.pem"), live.join("host.key"));
    let install = |from: &Path, to: &Path| std::fs::copy(from, to).map(drop).unwrap();
    install(&old.join("host.pem"), &cert);
    install(&old.join("host.key"), &key);
    let mut host = Host::start(&[
        "--rate",
        "200",
        "--status-ms",
        "0",
        "--log-format",
        "json",
        "--tls-cert",
        s(&cert),
        "--tls-key",
        s(&key),
    ]);
    host.wait_log(|v| logged(v, "WARN", &["the certificate expires on", "SIGHUP"]));
    verified(&host.addr, &old.join("ca.pem"));

    // Renewed by another CA: in place, then SIGHUP. New connections get the new one (a
    // viewer that trusts only the new CA verifies; one that trusts only the old is
    // refused), and the host goes on running.
    host_ok(&[
        "cert",
        "create-ca",
        "--certs-dir",
        s(&new),
        "--name",
        "new CA",
    ]);
    host_ok(&["cert", "create-host", "127.0.0.1", "--certs-dir", s(&new)]);
    install(&new.join("host.pem"), &cert);
    install(&new.join("host.key"), &key);
    host.signal("HUP");
    let reloaded = host.wait_log(|v| logged(v, "INFO", &["reloaded the certificate"]));
    assert_eq!(reloaded["fields"]["cert"], s(&cert), "{reloaded}");
    verified(&host.addr, &new.join("ca.pem"));
    refused(
        &host.addr,
        &["--tls-ca", s(&old.join("ca.pem"))],
        &["not signed by a CA this viewer trusts"],
    );

    // A reload of files that are not a certificate keeps the one served, and says which
    // file is wrong.
    std::fs::write(&cert, "not a certificate\n").unwrap();
    host.signal("HUP");
    let error = host.wait_log(|v| logged(v, "ERROR", &["cannot reload the certificate"]));
    let msg = error["fields"]["message"].as_str().unwrap();
    assert!(
        msg.contains(s(&cert)) && msg.contains("still serving the certificate loaded before"),
        "{msg}"
    );
    verified(&host.addr, &new.join("ca.pem"));

    // A certificate that ends in 40 s (a margin for a loaded machine): served
    // after SIGHUP with the warning, then warned about when it ends, and the handshakes
    // viewers refuse after that are warned about with what to do.
    let short_ca = ca(d, "short-ca");
    let end = time::OffsetDateTime::now_utc() + time::Duration::seconds(40);
    let (c, k) = leaf_with(d, &short_ca, "short", &["127.0.0.1"], |p| p.not_after = end);
    install(&c, &cert);
    install(&k, &key);
    host.signal("HUP");
    host.wait_log(|v| logged(v, "INFO", &["reloaded the certificate"]));
    verified(&host.addr, &short_ca.pem);
    host.wait_log(|v| {
        logged(
            v,
            "WARN",
            &[
                "the certificate the host serves expired on",
                "viewers refuse it",
                "SIGHUP",
            ],
        )
    });
    refused(
        &host.addr,
        &["--tls-ca", s(&short_ca.pem)],
        &["the host's certificate has expired"],
    );
    let warned = host.wait_log(|v| {
        logged(
            v,
            "WARN",
            &[
                "TLS handshakes since the last warning",
                "expired on",
                "kill -HUP",
            ],
        )
    });
    assert_eq!(warned["fields"]["refused"], 1, "{warned}");
}

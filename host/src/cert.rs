//! `ostm-host cert`: the TLS files a deployment needs, made with rcgen (docs/tls.md): a CA
//! whose certificate viewers trust (`--tls-ca`), and the host's certificate and key for the
//! names and addresses viewers dial, signed by that CA.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use time::{Duration, OffsetDateTime};
use x509_parser::prelude::{FromDer, X509Certificate};

/// Default lifetime of a CA, in days (ten years).
pub const DEFAULT_CA_DAYS: u32 = 3650;
/// Default lifetime of a host certificate, in days.
pub const DEFAULT_HOST_DAYS: u32 = 365;
/// How far before now a new certificate starts, so that a viewer whose clock is a little
/// behind the host's accepts it at once.
pub const BACKDATE: Duration = Duration::hours(1);

/// Arguments of `cert`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  # A CA, then the host's certificate for the names and addresses viewers dial
  ostm-host cert create-ca --certs-dir certs
  ostm-host cert create-host localhost 127.0.0.1 host.example.net --certs-dir certs
  # Serve with it; viewers trust the CA
  ostm-host serve --listen 0.0.0.0:7878 --tls-cert certs/host.pem --tls-key certs/host.key --token-file token
  ostm-viewer attach host.example.net:7878 --tls-ca certs/ca.pem --token-file token
  # Keep the CA's key elsewhere (it signs host certificates; the host never needs it)
  ostm-host cert create-ca --certs-dir certs --ca-key ~/secret/ostm-ca.key
  ostm-host cert create-host host.example.net --certs-dir certs --ca-key ~/secret/ostm-ca.key

Keys are ECDSA P-256, written readable by their owner only (0600). Nothing is overwritten
unless --overwrite. docs/tls.md has the whole recipe, and one with openssl.

Exit codes: 0 written, 2 bad arguments or a file that cannot be read or written")]
pub struct Args {
    #[command(subcommand)]
    pub command: CertCommand,
}

/// What `cert` makes.
#[derive(clap::Subcommand, Debug)]
pub enum CertCommand {
    /// Make a CA: DIR/ca.pem (viewers pass it to --tls-ca) and its private key.
    #[command(after_help = "Examples:
  ostm-host cert create-ca --certs-dir certs
  ostm-host cert create-ca --certs-dir certs --ca-key ~/secret/ostm-ca.key --days 1825")]
    CreateCa(CreateCaArgs),
    /// Make the host's certificate and key (DIR/host.pem, DIR/host.key) for the names and
    /// addresses given, signed by the CA.
    #[command(after_help = "Examples:
  ostm-host cert create-host localhost 127.0.0.1 --certs-dir certs
  ostm-host cert create-host host.example.net 192.0.2.7 --certs-dir certs --days 90

Every name or address a viewer dials (or passes to --tls-name) must be among those given.")]
    CreateHost(CreateHostArgs),
}

/// Options both `create-ca` and `create-host` take.
#[derive(clap::Args, Debug)]
pub struct Common {
    /// The directory the files are written to (created if missing).
    #[arg(long, value_name = "DIR", default_value = "certs")]
    pub certs_dir: PathBuf,
    /// The CA's private key [default: DIR/ca.key].
    #[arg(long, value_name = "FILE")]
    pub ca_key: Option<PathBuf>,
    /// Replace files that already exist.
    #[arg(long)]
    pub overwrite: bool,
    /// Print what was written as one JSON object.
    #[arg(long)]
    pub json: bool,
}

impl Common {
    fn ca_cert(&self) -> PathBuf {
        self.certs_dir.join("ca.pem")
    }

    fn ca_key(&self) -> PathBuf {
        self.ca_key
            .clone()
            .unwrap_or_else(|| self.certs_dir.join("ca.key"))
    }
}

/// Arguments of `cert create-ca`.
#[derive(clap::Args, Debug)]
pub struct CreateCaArgs {
    #[command(flatten)]
    pub common: Common,
    /// Days the CA is valid.
    #[arg(long, default_value_t = DEFAULT_CA_DAYS, value_parser = clap::value_parser!(u32).range(1..=36_500))]
    pub days: u32,
    /// The CA's common name.
    #[arg(long, value_name = "NAME", default_value = "ostm CA")]
    pub name: String,
}

/// Arguments of `cert create-host`.
#[derive(clap::Args, Debug)]
pub struct CreateHostArgs {
    /// DNS names and IP addresses viewers reach the host by (e.g. localhost 127.0.0.1
    /// host.example.net); a leading `*.` names every host of a domain.
    #[arg(required = true, value_name = "NAME_OR_ADDRESS", value_parser = parse_name)]
    pub names: Vec<String>,
    #[command(flatten)]
    pub common: Common,
    /// Days the certificate is valid.
    #[arg(long, default_value_t = DEFAULT_HOST_DAYS, value_parser = clap::value_parser!(u32).range(1..=36_500))]
    pub days: u32,
}

/// Runs `cert`: 0 when written, 2 on failure.
pub fn main(args: Args) -> ExitCode {
    let result = match args.command {
        CertCommand::CreateCa(a) => create_ca(&a),
        CertCommand::CreateHost(a) => create_host(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// An IP address, or a DNS name of letters, digits and `-` in dot-separated labels
/// (optionally `*.` first).
fn parse_name(s: &str) -> Result<String, String> {
    if s.parse::<std::net::IpAddr>().is_ok() {
        return Ok(s.to_string());
    }
    let rest = s.strip_prefix("*.").unwrap_or(s);
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if s.len() <= 253 && rest.split('.').all(label_ok) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "`{s}` is neither an IP address nor a DNS name (labels of letters, digits and `-`, separated by dots)"
        ))
    }
}

/// The validity of a certificate made now for `days`.
fn validity(params: &mut CertificateParams, days: u32) -> OffsetDateTime {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - BACKDATE;
    params.not_after = now + Duration::days(i64::from(days));
    params.not_after
}

fn create_ca(a: &CreateCaArgs) -> Result<(), String> {
    let (cert_path, key_path) = (a.common.ca_cert(), a.common.ca_key());
    refuse_existing(&[&cert_path, &key_path], a.common.overwrite)?;
    let key = KeyPair::generate().map_err(|e| format!("cannot make a key: {e}"))?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, a.name.as_str());
    params.distinguished_name = dn;
    // It signs host certificates only, never another CA.
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let until = validity(&mut params, a.days);
    let cert = params
        .self_signed(&key)
        .map_err(|e| format!("cannot make the CA certificate: {e}"))?;
    write_file(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_file(&cert_path, cert.pem().as_bytes(), 0o644)?;
    let until = crate::tls::utc(until.unix_timestamp());
    if a.common.json {
        println!(
            "{}",
            serde_json::json!({
                "event": "wrote",
                "ca_cert": cert_path.display().to_string(),
                "ca_key": key_path.display().to_string(),
                "not_after": until,
            })
        );
    } else {
        println!(
            "wrote {} (the CA's certificate, valid until {until}: viewers pass --tls-ca {0}) and {} (its private key: keep it secret; it signs host certificates and the host never needs it)",
            cert_path.display(),
            key_path.display()
        );
        println!(
            "next: ostm-host cert create-host NAME_OR_ADDRESS... --certs-dir {}{}",
            a.common.certs_dir.display(),
            a.common
                .ca_key
                .as_ref()
                .map(|k| format!(" --ca-key {}", k.display()))
                .unwrap_or_default()
        );
    }
    Ok(())
}

fn create_host(a: &CreateHostArgs) -> Result<(), String> {
    let (ca_cert_path, ca_key_path) = (a.common.ca_cert(), a.common.ca_key());
    let cert_path = a.common.certs_dir.join("host.pem");
    let key_path = a.common.certs_dir.join("host.key");
    refuse_existing(&[&cert_path, &key_path], a.common.overwrite)?;
    let issuer = read_ca(&ca_cert_path, &ca_key_path)?;
    let key = KeyPair::generate().map_err(|e| format!("cannot make a key: {e}"))?;
    let mut params = CertificateParams::new(a.names.clone())
        .map_err(|e| format!("cannot use the names {:?}: {e}", a.names))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, a.names[0].as_str());
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let until = validity(&mut params, a.days);
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| format!("cannot sign the host certificate: {e}"))?;
    write_file(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_file(&cert_path, cert.pem().as_bytes(), 0o644)?;
    let until = crate::tls::utc(until.unix_timestamp());
    if a.common.json {
        println!(
            "{}",
            serde_json::json!({
                "event": "wrote",
                "cert": cert_path.display().to_string(),
                "key": key_path.display().to_string(),
                "names": a.names,
                "ca_cert": ca_cert_path.display().to_string(),
                "ca_key": ca_key_path.display().to_string(),
                "not_after": until,
            })
        );
    } else {
        println!(
            "wrote {} and {} for {}, signed by {}, valid until {until}",
            cert_path.display(),
            key_path.display(),
            a.names.join(", "),
            ca_cert_path.display()
        );
        println!(
            "next: ostm-host serve --tls-cert {} --tls-key {} ...; viewers: ostm-viewer attach {}:7878 --tls-ca {}",
            cert_path.display(),
            key_path.display(),
            a.names[0],
            ca_cert_path.display()
        );
    }
    Ok(())
}

/// The CA in `cert` (PEM) with its key in `key`: the certificate must be a CA's and the
/// key its own.
fn read_ca(cert: &Path, key: &Path) -> Result<Issuer<'static, KeyPair>, String> {
    let missing = |path: &Path, e: std::io::Error| {
        format!(
            "cannot read {}: {e} (make the CA first: ostm-host cert create-ca --certs-dir DIR, or name its key with --ca-key)",
            path.display()
        )
    };
    let pem = std::fs::read_to_string(cert).map_err(|e| missing(cert, e))?;
    let key_pem = std::fs::read_to_string(key).map_err(|e| missing(key, e))?;
    let key_pair = KeyPair::from_pem(&key_pem).map_err(|e| {
        format!(
            "{}: not a PEM private key rcgen can sign with: {e}",
            key.display()
        )
    })?;
    let der = rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| {
        format!(
            "{}: no PEM certificate (expected -----BEGIN CERTIFICATE-----): {e}",
            cert.display()
        )
    })?;
    let (_, parsed) = X509Certificate::from_der(&der)
        .map_err(|e| format!("{}: not a valid X.509 certificate: {e}", cert.display()))?;
    if !parsed.is_ca() {
        return Err(format!(
            "{} is not a CA certificate (no basicConstraints CA:TRUE): name the CA's certificate (ostm-host cert create-ca writes DIR/ca.pem)",
            cert.display()
        ));
    }
    if *parsed.public_key().subject_public_key.data != *key_pair.public_key_raw() {
        return Err(format!(
            "{} is not the private key of the CA certificate {} (their public keys differ): name the CA's own key with --ca-key",
            key.display(),
            cert.display()
        ));
    }
    Issuer::from_ca_cert_der(&der, key_pair)
        .map_err(|e| format!("{}: cannot sign with this CA: {e}", cert.display()))
}

/// Refuses, before anything is written, when one of `paths` exists and not `overwrite`.
fn refuse_existing(paths: &[&Path], overwrite: bool) -> Result<(), String> {
    if overwrite {
        return Ok(());
    }
    for p in paths {
        if p.exists() {
            return Err(format!(
                "{} already exists: pass --overwrite to replace it, or choose another --certs-dir",
                p.display()
            ));
        }
    }
    Ok(())
}

/// Writes `bytes` to `path` with permissions `mode` (the directory is created if missing).
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create the directory {}: {e}", dir.display()))?;
    }
    let fail = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(fail)?;
    // An existing file (--overwrite) keeps its mode through open(): set it.
    f.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(fail)?;
    f.write_all(bytes).map_err(fail)?;
    f.sync_all().map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::parse_name;

    #[test]
    fn names_are_ip_addresses_or_dns_names() {
        for ok in [
            "localhost",
            "127.0.0.1",
            "::1",
            "host.example.net",
            "*.example.net",
            "a-b.c",
        ] {
            assert_eq!(parse_name(ok).as_deref(), Ok(ok));
        }
        for bad in ["", "a b", "-a.b", "a..b", "*.", "é.example", "host:7878"] {
            assert!(parse_name(bad).is_err(), "{bad}");
        }
    }
}

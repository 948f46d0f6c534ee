//! Options both binaries' command lines share, one definition for both: the recording
//! (`ostm-viewer attach --record`, `ostm-host serve --record`) and the shared secret
//! (`--token`, `--token-file`, `OSTM_TOKEN`).

use ostm_protocol::format::recording::Durability;
use ostm_protocol::wire::MAX_TOKEN_LEN;
use std::path::PathBuf;

/// The recording options, shared by every command that records.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RecordArgs {
    /// Record the session to this .ostm file; while it runs the file is FILE.part, which
    /// `ostm-viewer recover` turns into FILE after a crash.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Overwrite an existing recording (FILE, FILE.part, numbered files).
    #[arg(long, requires = "record")]
    pub force: bool,
    /// fdatasync the recording at every flush (about 4 a second), so that a power loss,
    /// not only a killed process, loses at most the last flush.
    #[arg(long, requires = "record")]
    pub sync: bool,
    /// Test only (a planted fault): never flush the recording while it runs.
    #[arg(long, hide = true)]
    pub no_flush_for_tests: bool,
}

impl RecordArgs {
    /// How the recording reaches the disk.
    pub fn durability(&self) -> Durability {
        Durability {
            sync: self.sync,
            no_flush: self.no_flush_for_tests,
        }
    }
}

/// The shared secret, from the first of `--token`, `--token-file` and the `OSTM_TOKEN`
/// environment variable that is given. `--token-file` and `OSTM_TOKEN` keep it out of the
/// process list (`ps`); `--token` shows there.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TokenArgs {
    /// The shared secret (visible to other users in `ps`: prefer --token-file or
    /// OSTM_TOKEN). At most 255 bytes.
    #[arg(long, conflicts_with = "token_file")]
    pub token: Option<String>,
    /// Read the shared secret from this file (its content less one trailing newline).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

/// The environment variable that can hold the shared secret.
pub const TOKEN_ENV: &str = "OSTM_TOKEN";

impl TokenArgs {
    /// The token to use, if any: `--token`, else `--token-file`, else `OSTM_TOKEN` (an
    /// empty value means none).
    ///
    /// # Errors
    /// The file cannot be read or is not UTF-8, or the token is longer than 255 bytes.
    pub fn resolve(&self) -> Result<Option<String>, String> {
        self.resolve_with(std::env::var(TOKEN_ENV).ok())
    }

    /// [`TokenArgs::resolve`] with the environment's value given.
    ///
    /// # Errors
    /// As [`TokenArgs::resolve`].
    pub fn resolve_with(&self, env: Option<String>) -> Result<Option<String>, String> {
        let (token, from) = if let Some(t) = &self.token {
            (t.clone(), "--token".to_string())
        } else if let Some(path) = &self.token_file {
            let raw = std::fs::read(path)
                .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
            let text = String::from_utf8(raw).map_err(|e| {
                format!(
                    "the token file {} is not UTF-8 text (at byte {})",
                    path.display(),
                    e.utf8_error().valid_up_to()
                )
            })?;
            let t = text
                .strip_suffix("\r\n")
                .or_else(|| text.strip_suffix('\n'))
                .unwrap_or(&text)
                .to_string();
            (t, format!("the token file {}", path.display()))
        } else if let Some(t) = env {
            (t, TOKEN_ENV.to_string())
        } else {
            return Ok(None);
        };
        if token.len() > MAX_TOKEN_LEN {
            return Err(format!(
                "the token from {from} is {} bytes; a token is at most {MAX_TOKEN_LEN} bytes",
                token.len()
            ));
        }
        Ok(Some(token).filter(|t| !t.is_empty()))
    }
}

#[cfg(test)]
mod tests {
    use super::TokenArgs;

    #[test]
    fn the_token_comes_from_the_first_source_given_and_is_at_most_255_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t");
        std::fs::write(&f, "from-file\n").unwrap();
        let none = TokenArgs::default();
        assert_eq!(none.resolve_with(None), Ok(None));
        assert_eq!(
            none.resolve_with(Some("env".into())),
            Ok(Some("env".into()))
        );
        assert_eq!(none.resolve_with(Some(String::new())), Ok(None));
        let file = TokenArgs {
            token: None,
            token_file: Some(f.clone()),
        };
        assert_eq!(
            file.resolve_with(Some("env".into())),
            Ok(Some("from-file".into()))
        );
        let arg = TokenArgs {
            token: Some("arg".into()),
            token_file: None,
        };
        assert_eq!(arg.resolve_with(Some("env".into())), Ok(Some("arg".into())));
        let long = TokenArgs {
            token: Some("x".repeat(256)),
            token_file: None,
        };
        let e = long.resolve_with(None).unwrap_err();
        assert!(e.contains("256 bytes; a token is at most 255 bytes"), "{e}");
        assert!(TokenArgs {
            token: Some("x".repeat(255)),
            token_file: None
        }
        .resolve_with(None)
        .is_ok());
        let missing = TokenArgs {
            token: None,
            token_file: Some(dir.path().join("nope")),
        };
        assert!(missing
            .resolve_with(None)
            .unwrap_err()
            .contains("cannot read the token file"));
    }
}

/// NATS's own means of authentication and TLS, as options of both binaries (nothing
/// home-made: they go to the NATS client as they are).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct NatsAuthArgs {
    /// NATS user (with --nats-password).
    #[arg(long, requires = "nats_password")]
    pub nats_user: Option<String>,
    /// NATS password (also from NATS_PASSWORD).
    #[arg(long, env = "NATS_PASSWORD", hide_env_values = true)]
    pub nats_password: Option<String>,
    /// NATS token (also from NATS_TOKEN).
    #[arg(long, env = "NATS_TOKEN", hide_env_values = true)]
    pub nats_token: Option<String>,
    /// NATS credentials file (.creds).
    #[arg(long, value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,
    /// Trust this CA (PEM) and require TLS to the NATS server.
    #[arg(long, value_name = "PEM")]
    pub nats_ca: Option<PathBuf>,
}

impl NatsAuthArgs {
    /// The NATS client's options for these settings.
    ///
    /// # Errors
    /// The credentials file cannot be read.
    pub async fn connect_options(&self) -> Result<async_nats::ConnectOptions, String> {
        let mut o = async_nats::ConnectOptions::new();
        if let (Some(u), Some(p)) = (&self.nats_user, &self.nats_password) {
            o = o.user_and_password(u.clone(), p.clone());
        }
        if let Some(t) = &self.nats_token {
            o = o.token(t.clone());
        }
        if let Some(c) = &self.nats_creds {
            o = o
                .credentials_file(c)
                .await
                .map_err(|e| format!("cannot read the NATS credentials {}: {e}", c.display()))?;
        }
        if let Some(ca) = &self.nats_ca {
            o = o.add_root_certificates(ca.clone()).require_tls(true);
        }
        Ok(o)
    }
}

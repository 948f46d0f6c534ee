//! What commands print about a replay file: hashes, format errors (text and JSON), and
//! the link block (`inspect`, `verify`, `attach` for a live world's link).

use crate::exit::{fail, Exit};
use ostm_protocol::{FormatError, Link, Replay};
use serde::Serialize;
use std::path::Path;

/// A u64 hash as 16 lower-case hex digits, as every tool prints it.
pub fn hex(h: u64) -> String {
    format!("{h:016x}")
}

/// A format error as the JSON object the tools print: `{input, offset, message}`.
pub fn error_json(e: &FormatError) -> serde_json::Value {
    serde_json::json!({ "input": e.input, "offset": e.offset, "message": e.message })
}

/// Reads a replay, logging what was read.
pub fn read(path: &Path) -> Result<Replay, FormatError> {
    let replay = Replay::read_file(path)?;
    tracing::debug!(file = %path.display(), steps = replay.step_count(), "replay read");
    Ok(replay)
}

/// The link block with what its role declares.
#[derive(Serialize)]
pub struct LinkInfo {
    pub role: u8,
    pub role_name: &'static str,
    pub body: u8,
    pub transfer_step: u16,
    /// `ContinuedBy` (role 1), `Continues` (role 2), null (role 3).
    pub declaration: Option<&'static str>,
    pub key: Option<&'static str>,
    pub peer_key: Option<&'static str>,
}

impl LinkInfo {
    /// One line: the role, what moves when, the declaration and both keys (also printed by
    /// `attach` for a live world with a link block).
    pub fn describe(&self) -> String {
        match (self.declaration, self.key, self.peer_key) {
            (Some(decl), Some(key), Some(peer)) => format!(
                "role {} ({}): body {} {} at step {}; declares {decl}, key {key}, peer key {peer}",
                self.role,
                self.role_name,
                self.body,
                if self.role == 1 { "leaves" } else { "arrives" },
                self.transfer_step,
            ),
            _ => format!(
                "role {} ({}): declares the density and occupancy fields only (body byte {}, transfer step {} kept as read)",
                self.role, self.role_name, self.body, self.transfer_step
            ),
        }
    }
}

/// The link block as `inspect` and `attach` report it.
pub fn link_info(l: &Link) -> LinkInfo {
    LinkInfo {
        role: l.role as u8,
        role_name: l.role.name(),
        body: l.body,
        transfer_step: l.transfer_step,
        declaration: l.declaration(),
        key: l.own_key(),
        peer_key: l.peer_key(),
    }
}

/// Reports a malformed or unreadable file: the error on stderr, and with `--json` the
/// object `{file, valid: false, error}` on stdout. Returns exit 2.
pub fn malformed(file: &Path, json: bool, e: &FormatError) -> Exit {
    if json {
        let doc = serde_json::json!({
            "file": file.display().to_string(),
            "valid": false,
            "error": error_json(e),
        });
        println!("{doc}");
    }
    fail(e)
}

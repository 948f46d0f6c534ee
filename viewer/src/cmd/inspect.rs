//! `ostm-viewer inspect`: reads and validates a whole replay (every step's ops too) and
//! prints what it holds. The JSON object is documented in `docs/replay-format.md`.

use crate::exit::{fail, Exit};
use crate::report::replay::{hex, link_info, malformed, read, LinkInfo};
use ostm_protocol::format::ostm::{FLAG_HASHES, FLAG_LINK, FLAG_START_SNAPSHOT, MAGIC, VERSION};
use ostm_protocol::{OpKind, Replay};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Arguments of `inspect`.
#[derive(clap::Args)]
#[command(
    after_help = "Exit codes: 0 the file is valid, 2 it is malformed or unreadable \
(the error names the file, the byte offset and what was expected there).

Examples:
  ostm-viewer inspect testdata/test-10000.ostm
  ostm-viewer inspect testdata/test-link-left.ostm --json | jq .link
  ostm-viewer inspect testdata/malformed/trailing-byte.ostm   # exits 2"
)]
pub struct Args {
    /// The replay file (.ostm).
    pub file: PathBuf,
    /// Print one JSON object on stdout instead of text (also for a malformed file).
    #[arg(long)]
    pub json: bool,
}

/// The flags word, bit by bit.
#[derive(Serialize)]
pub struct Flags {
    pub value: u16,
    pub hash_rows: bool,
    pub start_snapshot: bool,
    pub link: bool,
}

/// The setup: dimensions, initial body count, seed.
#[derive(Serialize)]
pub struct SetupInfo {
    pub dims: u8,
    pub bodies: u8,
    pub seed: u32,
}

/// The start snapshot (flag bit 1).
#[derive(Serialize)]
pub struct SnapshotInfo {
    pub bytes: u64,
    pub step: u64,
    pub gravity: i32,
    pub slots: u64,
    pub alive: u64,
}

/// Op counts over all steps.
#[derive(Serialize)]
pub struct OpsInfo {
    pub impulse: u64,
    pub teleport: u64,
    pub remove: u64,
    pub gravity: u64,
    pub spawn: u64,
    pub total: u64,
    pub empty_steps: u64,
}

/// One hash row: the step it belongs to and the hash in hex.
#[derive(Serialize)]
pub struct HashRow {
    pub step: u64,
    pub hash: String,
}

/// The hash rows (flag bit 0).
#[derive(Serialize)]
pub struct HashesInfo {
    pub rows: u64,
    pub first: HashRow,
    pub last: HashRow,
}

/// Everything `inspect` reports about a valid file.
#[derive(Serialize)]
pub struct Summary {
    pub file: String,
    pub valid: bool,
    pub bytes: u64,
    pub magic: String,
    pub version: u16,
    pub flags: Flags,
    pub setup: SetupInfo,
    pub link: Option<LinkInfo>,
    pub start_step: u64,
    pub start_snapshot: Option<SnapshotInfo>,
    pub step_count: u64,
    pub end_step: u64,
    pub ops: OpsInfo,
    pub hashes: Option<HashesInfo>,
}

impl Summary {
    /// Summarises a replay read from `file`, which was `bytes` long.
    pub fn new(file: &Path, bytes: u64, r: &Replay) -> Summary {
        let flags = r.flags();
        let counts = r.op_counts();
        let by = |k: OpKind| counts.by_kind[k as usize - 1];
        let start_step = r.start_step();
        let steps = r.step_count() as u64;
        let row = |i: usize, h: &[u64]| HashRow {
            step: start_step.wrapping_add(i as u64),
            hash: hex(h[i]),
        };
        Summary {
            file: file.display().to_string(),
            valid: true,
            bytes,
            magic: String::from_utf8_lossy(MAGIC).into_owned(),
            version: VERSION,
            flags: Flags {
                value: flags,
                hash_rows: flags & FLAG_HASHES != 0,
                start_snapshot: flags & FLAG_START_SNAPSHOT != 0,
                link: flags & FLAG_LINK != 0,
            },
            setup: SetupInfo {
                dims: r.setup.dims as u8,
                bodies: r.setup.bodies,
                seed: r.setup.seed,
            },
            link: r.link.as_ref().map(link_info),
            start_step,
            start_snapshot: r.start.as_ref().map(|w| SnapshotInfo {
                bytes: w.snapshot_len() as u64,
                step: w.step,
                gravity: w.gravity,
                slots: w.bodies.len() as u64,
                alive: w.alive_count() as u64,
            }),
            step_count: steps,
            end_step: start_step.wrapping_add(steps),
            ops: OpsInfo {
                impulse: by(OpKind::Impulse),
                teleport: by(OpKind::Teleport),
                remove: by(OpKind::Remove),
                gravity: by(OpKind::Gravity),
                spawn: by(OpKind::Spawn),
                total: counts.by_kind.iter().sum(),
                empty_steps: counts.empty_steps,
            },
            hashes: r
                .hashes
                .as_deref()
                .filter(|h| !h.is_empty())
                .map(|h| HashesInfo {
                    rows: h.len() as u64,
                    first: row(0, h),
                    last: row(h.len() - 1, h),
                }),
        }
    }

    /// The text report, one `name  value` line per item.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let mut line = |name: &str, value: String| out.push_str(&format!("{name:<12}{value}\n"));
        line("file", format!("{} ({} bytes)", self.file, self.bytes));
        line("magic", self.magic.clone());
        line("version", self.version.to_string());
        let f = &self.flags;
        let mut bits = Vec::new();
        if f.hash_rows {
            bits.push("bit 0 hash rows");
        }
        if f.start_snapshot {
            bits.push("bit 1 start snapshot");
        }
        if f.link {
            bits.push("bit 2 link block");
        }
        let bits = if bits.is_empty() {
            "none set".to_string()
        } else {
            bits.join(", ")
        };
        line("flags", format!("0x{:04x}: {bits}", f.value));
        let s = &self.setup;
        line(
            "setup",
            format!(
                "{}D, {} bodies, seed {} (0x{:08x})",
                s.dims, s.bodies, s.seed, s.seed
            ),
        );
        let link = match &self.link {
            None => "none".to_string(),
            Some(l) => l.describe(),
        };
        line("link", link);
        let start = match &self.start_snapshot {
            None => format!("step {} (the setup's world)", self.start_step),
            Some(w) => format!(
                "step {} (start snapshot: {} bytes, {} slots, {} alive, gravity {})",
                self.start_step, w.bytes, w.slots, w.alive, w.gravity
            ),
        };
        line("start", start);
        line(
            "steps",
            format!(
                "{} (steps {}..{})",
                self.step_count, self.start_step, self.end_step
            ),
        );
        let o = &self.ops;
        line(
            "ops",
            format!(
                "{} in all: impulse {}, teleport {}, remove {}, gravity {}, spawn {}; {} empty steps",
                o.total, o.impulse, o.teleport, o.remove, o.gravity, o.spawn, o.empty_steps
            ),
        );
        let hashes = match &self.hashes {
            None => "none".to_string(),
            Some(h) => format!(
                "{} rows: first {} (step {}), last {} (step {})",
                h.rows, h.first.hash, h.first.step, h.last.hash, h.last.step
            ),
        };
        line("hash rows", hashes);
        out
    }
}

/// Runs `inspect`.
pub fn run(args: Args) -> Exit {
    let replay = match read(&args.file) {
        Ok(r) => r,
        Err(e) => return malformed(&args.file, args.json, &e),
    };
    let bytes = std::fs::metadata(&args.file).map_or(0, |m| m.len());
    let summary = Summary::new(&args.file, bytes, &replay);
    if args.json {
        match serde_json::to_string_pretty(&summary) {
            Ok(text) => println!("{text}"),
            Err(e) => return fail(e),
        }
    } else {
        print!("{}", summary.text());
    }
    Exit::Ok
}

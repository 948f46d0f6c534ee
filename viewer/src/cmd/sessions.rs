//! `ostm-viewer sessions nats://HOST:PORT`: the sessions a NATS server holds, one line
//! each (docs/fan-out.md, "Sessions on a server").

use crate::exit::{fail, Exit};
use crate::live::sessions::{list, Listed};
use ostm_runtime::cli::NatsAuthArgs;

/// Arguments of `sessions`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  # The sessions on a local server, as a table
  ostm-viewer sessions nats://127.0.0.1:4222
  # The sessions of a cluster, through whichever of its servers answers
  ostm-viewer sessions nats://127.0.0.1:4222,127.0.0.1:4223,127.0.0.1:4224
  # As JSON: the names of the sessions still running
  ostm-viewer sessions nats://127.0.0.1:4222 --json | jq -r '.sessions[] | select(.ended == false) | .session'
  # Then attach to one of them, or rewind it to its oldest keyframe
  ostm-viewer attach nats://127.0.0.1:4222/demo
  ostm-viewer attach nats://127.0.0.1:4222/demo --from-step 0

One line per session (stream OSTM_NAME), by name: its world (from its last keyframe), the
host's step, its rate, the oldest step the stream still holds and its oldest keyframe (as
far back as --from-step goes), the last keyframe's step and age, and whether the host
ended the stream. `-` where the stream does not say (no keyframe held yet, no message, or
a message that cannot be read: its note follows the line).
With --json, one object: {\"server\": URL, \"sessions\": [...]}.

Exit codes:
  0  listed (also when the server holds no session)
  2  a bad address, or the server cannot be reached or has no JetStream")]
pub struct Args {
    /// The NATS server, nats://HOST:PORT, or several joined by commas
    /// (nats://HOST:PORT,HOST:PORT: the client takes one and fails over to the others).
    pub server: String,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub nats: NatsAuthArgs,
}

/// Runs `sessions`.
pub fn run(args: Args) -> Exit {
    let url = match server(&args.server) {
        Ok(u) => u,
        Err(e) => return fail(e),
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the runtime: {e}")),
    };
    let listed = match rt.block_on(list(&url, &args.nats)) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    if args.json {
        let sessions: Vec<_> = listed.iter().map(to_json).collect();
        println!(
            "{}",
            serde_json::json!({"server": url.to_string(), "sessions": sessions})
        );
    } else if listed.is_empty() {
        println!("no sessions on {url}");
    } else {
        print!("{}", table(&listed));
    }
    Exit::Ok
}

/// `nats://HOST:PORT` (or several joined by commas), checked.
fn server(s: &str) -> Result<ostm_protocol::wire::nats::Servers, String> {
    ostm_protocol::wire::nats::Servers::parse(s).ok_or_else(|| {
        format!("{s}: expected nats://HOST:PORT, the server, or several joined by commas (attach takes nats://HOST:PORT/NAME)")
    })
}

fn to_json(l: &Listed) -> serde_json::Value {
    let w = l.world.as_ref();
    serde_json::json!({
        "session": l.session,
        "stream": l.stream,
        "dims": w.map(|w| w.dims),
        "bodies": w.map(|w| w.bodies),
        "alive": w.map(|w| w.alive),
        "seed": w.map(|w| w.seed),
        "host_step": l.host_step,
        "rate": l.rate,
        "oldest_step": l.oldest_step,
        "oldest_keyframe": l.oldest_keyframe,
        "last_keyframe_step": l.last_keyframe_step,
        "last_keyframe_age_ms": l.last_keyframe_age_ms,
        "ended": (l.messages > 0).then_some(l.ended.is_some()),
        "end_reason": l.ended.as_ref().map(|e| &e.0),
        "end_text": l.ended.as_ref().map(|e| &e.1),
        "messages": l.messages,
        "bytes": l.bytes,
        "problem": l.problem,
    })
}

/// The sessions as an aligned table, a header first; a problem on a line of its own.
fn table(listed: &[Listed]) -> String {
    let dash = || "-".to_string();
    let num = |v: Option<u64>| v.map_or_else(dash, |v| v.to_string());
    let mut rows = vec![[
        "SESSION",
        "WORLD",
        "HOST STEP",
        "RATE",
        "OLDEST STEP",
        "OLDEST KEYFRAME",
        "LAST KEYFRAME",
        "ENDED",
    ]
    .map(String::from)];
    for l in listed {
        rows.push([
            l.session.clone(),
            l.world.map_or_else(dash, |w| {
                format!("{}D {} bodies seed {}", w.dims, w.alive, w.seed)
            }),
            num(l.host_step),
            l.rate.map_or_else(dash, |r| match r {
                0 => "max".into(),
                r => format!("{r}/s"),
            }),
            num(l.oldest_step),
            num(l.oldest_keyframe),
            match (l.last_keyframe_step, l.last_keyframe_age_ms) {
                (Some(s), Some(ms)) => format!("{s}, {}.{} s ago", ms / 1000, ms % 1000 / 100),
                _ => dash(),
            },
            match &l.ended {
                Some((reason, _)) => format!("yes ({reason})"),
                None if l.messages == 0 => dash(),
                None => "no".into(),
            },
        ]);
    }
    let widths: Vec<usize> = (0..8)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, r) in rows.iter().enumerate() {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
        // Row 0 is the header; row i is listed[i - 1].
        let problem = i.checked_sub(1).and_then(|j| listed[j].problem.as_ref());
        if let Some(p) = problem {
            out.push_str(&format!("  note: {p}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::sessions::WorldLine;

    #[test]
    fn the_server_address_is_checked() {
        let s = |a: &str| server(a).unwrap().to_string();
        assert_eq!(s("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(s("nats://h:1/"), "nats://h:1");
        assert_eq!(s("nats://h:1,g:2"), "nats://h:1,nats://g:2");
        for bad in ["127.0.0.1:4222", "nats://", "nats://h:1/demo"] {
            assert!(server(bad)
                .unwrap_err()
                .contains("expected nats://HOST:PORT"));
        }
    }

    #[test]
    fn the_table_is_aligned_with_a_dash_for_what_is_unknown() {
        let a = Listed {
            session: "demo".into(),
            stream: "OSTM_demo".into(),
            world: Some(WorldLine {
                dims: 3,
                bodies: 64,
                alive: 33,
                seed: 10_000,
            }),
            host_step: Some(12_345),
            rate: Some(60),
            oldest_step: Some(0),
            oldest_keyframe: Some(0),
            last_keyframe_step: Some(12_300),
            last_keyframe_age_ms: Some(750),
            ended: None,
            messages: 10,
            ..Listed::default()
        };
        let b = Listed {
            session: "x".into(),
            messages: 1,
            ended: Some(("finished".into(), "done".into())),
            problem: Some("a note".into()),
            ..Listed::default()
        };
        let t = table(&[a, b]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(lines[0].starts_with("SESSION  WORLD"), "{t}");
        assert!(
            lines[1].starts_with("demo     3D 33 bodies seed 10000  12345"),
            "{t}"
        );
        assert!(
            lines[1].contains("60/s") && lines[1].ends_with("12300, 0.7 s ago  no"),
            "{t}"
        );
        assert!(
            lines[2].starts_with("x        -") && lines[2].ends_with("yes (finished)"),
            "{t}"
        );
        assert_eq!(lines[3], "  note: a note");
        let col = lines[0].find("HOST STEP").unwrap();
        assert_eq!(&lines[1][col..col + 5], "12345", "{t}");
    }
}

//! `ostm-viewer follow`: one body's track across a linked pair of worlds.

use crate::exit::{fail, Exit};
use ostm_protocol::{Replay, Role, World};
use serde_json::json;
use std::path::{Path, PathBuf};

/// Arguments of `follow`.
#[derive(clap::Args)]
#[command(
    after_help = "LEFT must be the sender (role 1: declares ContinuedBy, key tm-left) and RIGHT the \
receiver (role 2: declares Continues, key tm-right) of the same body at the same transfer \
step T, in worlds of the same dimensions, and both replays must hold steps T and T + 1. Then the \
body is followed: last seen in LEFT at step T, gone at step T + 1; absent in RIGHT at step T, \
present at step T + 1. Exit 0 when the pair continues each other, 1 when it does not (every \
reason is listed), 2 on unreadable input.

Examples:
  ostm-viewer follow testdata/test-link-left.ostm testdata/test-link-right.ostm --body 3
  ostm-viewer follow testdata/test-link-left.ostm testdata/test-link-right.ostm --body 3 --window 10 --json"
)]
pub struct Args {
    /// The sending world's replay.
    pub left: PathBuf,
    /// The receiving world's replay.
    pub right: PathBuf,
    /// The body to follow; must be the body both link blocks name (default: LEFT's).
    #[arg(long)]
    pub body: Option<u8>,
    /// Steps of track shown on each side of the transfer.
    #[arg(long, default_value_t = 3)]
    pub window: u64,
    /// Print JSON for scripts.
    #[arg(long)]
    pub json: bool,
}

/// A body's state at one step of one world.
#[derive(Debug, Clone, Copy)]
struct Seen {
    side: &'static str,
    step: u64,
    pos: Option<[i32; 3]>,
    vel: [i32; 3],
}

fn describe(name: &str, r: &Replay) -> serde_json::Value {
    match r.link {
        None => json!({ "file": name, "link": null }),
        Some(l) => json!({
            "file": name,
            "role": l.role as u8,
            "role_name": l.role.name(),
            "declaration": l.declaration(),
            "key": l.own_key(),
            "body": l.body,
            "transfer_step": l.transfer_step,
            "dims": r.setup.dims as u8,
        }),
    }
}

fn line(side: &str, name: &str, r: &Replay) -> String {
    match r.link {
        None => format!("{side:<5} {name}: no link block"),
        Some(l) => format!(
            "{side:<5} {name}: {} (role {}), body {}, transfer step {}{}",
            l.role.name(),
            l.role as u8,
            l.body,
            l.transfer_step,
            match (l.declaration(), l.own_key()) {
                (Some(d), Some(k)) => format!(", declares {d}, key {k}"),
                _ => String::new(),
            }
        ),
    }
}

/// Why the pair does not continue each other, from the headers alone.
fn header_reasons(left: &Replay, right: &Replay, body: Option<u8>) -> Vec<String> {
    let mut why = Vec::new();
    let (l, r) = match (left.link, right.link) {
        (Some(l), Some(r)) => (l, r),
        (l, r) => {
            if l.is_none() {
                why.push("LEFT has no link block".to_string());
            }
            if r.is_none() {
                why.push("RIGHT has no link block".to_string());
            }
            return why;
        }
    };
    if l.role != Role::Sender {
        why.push(format!(
            "LEFT is {} (role {}{}), but the left side must be the sender: ContinuedBy, key tm-left",
            l.role.name(),
            l.role as u8,
            l.own_key().map_or(String::new(), |k| format!(", key {k}"))
        ));
    }
    if r.role != Role::Receiver {
        why.push(format!(
            "RIGHT is {} (role {}{}), but the right side must be the receiver: Continues, key tm-right",
            r.role.name(),
            r.role as u8,
            r.own_key().map_or(String::new(), |k| format!(", key {k}"))
        ));
    }
    if l.body != r.body {
        why.push(format!(
            "LEFT sends body {} but RIGHT receives body {}",
            l.body, r.body
        ));
    }
    if let Some(b) = body {
        if b != l.body {
            why.push(format!("--body {b}, but LEFT's link names body {}", l.body));
        }
        if b != r.body && r.body == l.body {
            why.push(format!(
                "--body {b}, but RIGHT's link names body {}",
                r.body
            ));
        }
    }
    if l.transfer_step != r.transfer_step {
        why.push(format!(
            "LEFT's transfer step is {} but RIGHT's is {}",
            l.transfer_step, r.transfer_step
        ));
    }
    if left.setup.dims != right.setup.dims {
        why.push(format!(
            "LEFT is {}D but RIGHT is {}D",
            left.setup.dims as u8, right.setup.dims as u8
        ));
    }
    for (side, rep) in [("LEFT", left), ("RIGHT", right)] {
        let first = rep.start_step();
        let last = rep.end_step();
        let t = l.transfer_step as u64;
        if first.checked_add(rep.step_count() as u64).is_none() {
            // Its transfer may run after the wrap (steps 0, 1, ... follow u64::MAX), but
            // the track is followed by step number, which the wrap does not keep in order.
            why.push(format!(
                "{side} holds steps {first}..={last}, whose step numbers wrap to 0 after {}: follow takes only replays whose steps do not",
                u64::MAX
            ));
        } else if t < first || t + 1 > last {
            why.push(format!(
                "{side} holds steps {first}..={last}, so it does not run transfer step {t} (it needs steps {t} and {})",
                t + 1
            ));
        }
    }
    why
}

/// The body's state at every step of `replay` from its start up to `until`.
fn track(side: &'static str, replay: &Replay, body: u8, until: u64) -> Vec<Seen> {
    let mut world: World = replay.start_world();
    let mut out = Vec::new();
    let first = replay.start_step();
    loop {
        let b = world.bodies.get(body as usize).filter(|b| b.alive);
        out.push(Seen {
            side,
            step: world.step,
            pos: b.map(|b| b.pos),
            vel: b.map_or([0; 3], |b| b.vel),
        });
        let i = (world.step - first) as usize;
        if world.step >= until || i >= replay.step_count() {
            break;
        }
        world.step(&replay.inputs.ops(i));
    }
    out
}

fn fmt_pos(p: [i32; 3]) -> String {
    format!("({}, {}, {})", p[0], p[1], p[2])
}

/// Runs `follow`.
pub fn run(args: Args) -> Exit {
    let read = |p: &Path| Replay::read_file(p);
    let (left, right) = match (read(&args.left), read(&args.right)) {
        (Ok(l), Ok(r)) => (l, r),
        (Err(e), _) | (_, Err(e)) => return fail(e),
    };
    let (lname, rname) = (
        args.left.display().to_string(),
        args.right.display().to_string(),
    );
    let mut reasons = header_reasons(&left, &right, args.body);
    let mut summary = serde_json::Value::Null;
    let mut shown: Vec<Seen> = Vec::new();
    let mut text = Vec::new();
    if reasons.is_empty() {
        // Checked above: both links present, same body and step.
        let (body, t) = match left.link {
            Some(l) => (l.body, l.transfer_step as u64),
            None => return fail("LEFT has no link block"),
        };
        let lt = track("LEFT", &left, body, t + 1);
        let rt = track("RIGHT", &right, body, t + 1);
        let last_alive = lt.iter().rev().find(|s| s.pos.is_some()).copied();
        let gone = match last_alive {
            Some(s) => lt
                .iter()
                .find(|g| g.step > s.step && g.pos.is_none())
                .map(|g| g.step),
            None => None,
        };
        let appeared = rt.iter().find(|s| s.pos.is_some()).copied();
        match last_alive {
            None => reasons.push(format!("body {body} is never alive in LEFT up to step {}", t + 1)),
            Some(s) if s.step != t => reasons.push(format!(
                "body {body} was last alive in LEFT at step {} (removed before the transfer step {t})",
                s.step
            )),
            Some(_) => {}
        }
        match appeared {
            None => reasons.push(format!(
                "body {body} never appears in RIGHT up to step {}",
                t + 1
            )),
            Some(s) if s.step != t + 1 => reasons.push(format!(
                "body {body} is already present in RIGHT at step {}, before the transfer",
                s.step
            )),
            Some(_) => {}
        }
        if let (Some(g), Some(a)) = (gone, appeared) {
            if g != a.step {
                reasons.push(format!(
                    "step numbers disagree: body {body} is gone from LEFT at step {g} but appears in RIGHT at step {}",
                    a.step
                ));
            }
        }
        if reasons.is_empty() {
            if let (Some(l), Some(g), Some(a)) = (last_alive, gone, appeared) {
                let lp = l.pos.unwrap_or_default();
                let ap = a.pos.unwrap_or_default();
                text.push(format!(
                    "body {body} left LEFT during step {t}: last seen at step {} at {} moving {}, gone at step {g}",
                    l.step,
                    fmt_pos(lp),
                    fmt_pos(l.vel)
                ));
                text.push(format!(
                    "body {body} appeared in RIGHT during step {t}: absent at step {t}, at step {} at {} moving {}",
                    a.step,
                    fmt_pos(ap),
                    fmt_pos(a.vel)
                ));
                text.push(format!(
                    "step numbers agree: gone from LEFT at step {g}, appeared in RIGHT at step {}",
                    a.step
                ));
                summary = json!({
                    "transfer_step": t,
                    "left_last_seen": { "step": l.step, "pos": lp, "vel": l.vel },
                    "left_gone_at_step": g,
                    "right_appeared": { "step": a.step, "pos": ap, "vel": a.vel },
                });
                let from = (t + 1).saturating_sub(args.window);
                shown.extend(lt.iter().filter(|s| s.step >= from && s.step <= t));
                let rt_long = track("RIGHT", &right, body, t + args.window);
                shown.extend(
                    rt_long
                        .iter()
                        .filter(|s| s.step > t && s.step <= t + args.window),
                );
            }
        }
    }
    let continues = reasons.is_empty();
    if args.json {
        let track: Vec<_> = shown
            .iter()
            .map(|s| json!({ "world": s.side.to_lowercase(), "step": s.step, "pos": s.pos, "vel": s.pos.map(|_| s.vel) }))
            .collect();
        println!(
            "{}",
            json!({
                "left": describe(&lname, &left),
                "right": describe(&rname, &right),
                "body": args.body.or(left.link.map(|l| l.body)),
                "continues": continues,
                "reasons": reasons,
                "transfer": summary,
                "track": track,
            })
        );
    } else {
        println!("{}", line("LEFT", &lname, &left));
        println!("{}", line("RIGHT", &rname, &right));
        if continues {
            for l in &text {
                println!("{l}");
            }
            println!("track:");
            for s in &shown {
                match s.pos {
                    Some(p) => println!(
                        "  {:<5} step {:>6}  {}  moving {}",
                        s.side,
                        s.step,
                        fmt_pos(p),
                        fmt_pos(s.vel)
                    ),
                    None => println!("  {:<5} step {:>6}  absent", s.side, s.step),
                }
            }
            println!("the pair continues each other");
        } else {
            println!("the pair does not continue each other:");
            for r in &reasons {
                println!("  - {r}");
            }
        }
    }
    if continues {
        Exit::Ok
    } else {
        Exit::Different
    }
}

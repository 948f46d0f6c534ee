//! Keyframes: a world at a step as a `molen/keyframe@1` JSON document, and back.
//!
//! `docs/keyframe.md` describes every field. In short: one entity per body slot (`b0`,
//! `b1`, … in index order), each with a `transform` (metres, identity rotation) for any
//! keyframe viewer and an exact `body` component in integer millimetres, which is what
//! import reads; the setup, link and gravity sit under `plugins.ostm`.
//!
//! Import checks the whole document, naming the JSON path of the first problem, before
//! it builds anything.

use crate::error::FormatError;
use crate::format::ostm::{Replay, Verdict};
use crate::sim::link::{Link, Role};
use crate::sim::rng::Sfc32;
use crate::sim::world::{Body, Dims, Setup, World, MAX_BODIES};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::{Map, Value};
use std::path::Path;

/// The host's step rate unless told otherwise.
pub const DEFAULT_TICK_RATE: u32 = 60;
/// The schema's largest `tickRate`.
pub const MAX_TICK_RATE: u32 = 240;
/// The schema's largest integer (2^53 - 1), the most a `tick` may be.
pub const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;
/// The largest keyframe file import reads.
pub const MAX_KEYFRAME_BYTES: u64 = 1 << 20;
/// The plugin key holding the test module's own state.
pub const PLUGIN: &str = "ostm";
/// The engine name written to `engine` is this crate's version.
pub const ENGINE: &str = env!("CARGO_PKG_VERSION");

/// The sfc32 state after the setup's initial bodies were drawn: seeded from the setup's
/// seed ([`Sfc32::from_seed`]), then 2 draws per axis per initial body (position, then
/// velocity). The simulation draws nothing after that, so this state is fixed for a setup.
pub fn rng_state(setup: &Setup) -> [u32; 4] {
    let mut rng = Sfc32::from_seed(setup.seed);
    for _ in 0..setup.bodies as usize * 2 * setup.dims.axes() {
        rng.next_u32();
    }
    rng.state
}

/// A keyframe read back: the world it holds and the rate it declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyframe {
    /// The world at `tick` (its `step`).
    pub world: World,
    /// `tickRate`.
    pub tick_rate: u32,
    /// `engine`, as written by whoever made the keyframe.
    pub engine: String,
}

#[derive(Serialize)]
struct Doc<'a> {
    kind: &'static str,
    v: u32,
    engine: &'static str,
    tick: u64,
    #[serde(rename = "tickRate")]
    tick_rate: u32,
    seed: u32,
    #[serde(rename = "nextEntitySeq")]
    next_entity_seq: usize,
    rng: Rng,
    #[serde(rename = "entityOrder")]
    entity_order: Vec<String>,
    entities: Entities<'a>,
    plugins: Plugins,
}

#[derive(Serialize)]
struct Rng {
    algo: &'static str,
    state: [u32; 4],
}

struct Entities<'a>(&'a [Body]);

impl Serialize for Entities<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (i, b) in self.0.iter().enumerate() {
            m.serialize_entry(&format!("b{i}"), &Entity::from(b))?;
        }
        m.end()
    }
}

#[derive(Serialize)]
struct Entity {
    transform: Transform,
    body: BodyComponent,
}

#[derive(Serialize)]
struct Transform {
    pos: [f64; 3],
    rot: [u8; 4],
}

#[derive(Serialize)]
struct BodyComponent {
    alive: bool,
    still: u32,
    pos: [i32; 3],
    vel: [i32; 3],
}

impl From<&Body> for Entity {
    fn from(b: &Body) -> Entity {
        Entity {
            transform: Transform {
                pos: b.pos.map(|mm| mm as f64 / 1000.0),
                rot: [0, 0, 0, 1],
            },
            body: BodyComponent {
                alive: b.alive,
                still: b.still,
                pos: b.pos,
                vel: b.vel,
            },
        }
    }
}

#[derive(Serialize)]
struct Plugins {
    ostm: OstmPlugin,
}

#[derive(Serialize)]
struct OstmPlugin {
    dims: u8,
    bodies: u8,
    gravity: i32,
    link: Option<LinkJson>,
}

#[derive(Serialize)]
struct LinkJson {
    role: u8,
    body: u8,
    #[serde(rename = "transferStep")]
    transfer_step: u16,
}

/// Why a world cannot be exported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    /// The step is above 2^53 - 1, which the schema's `tick` cannot hold.
    #[error("step {0} is above 2^53 - 1, the largest tick a keyframe holds")]
    TickTooLarge(u64),
    /// The rate is outside 1..=240.
    #[error("tick rate {0} is outside 1..=240")]
    TickRate(u32),
}

fn doc(world: &World, tick_rate: u32) -> Result<Doc<'_>, ExportError> {
    if world.step > MAX_SAFE_INTEGER {
        return Err(ExportError::TickTooLarge(world.step));
    }
    if tick_rate == 0 || tick_rate > MAX_TICK_RATE {
        return Err(ExportError::TickRate(tick_rate));
    }
    let setup = world.setup();
    Ok(Doc {
        kind: "keyframe",
        v: 1,
        engine: ENGINE,
        tick: world.step,
        tick_rate,
        seed: setup.seed,
        next_entity_seq: world.bodies.len(),
        rng: Rng {
            algo: "sfc32",
            state: rng_state(&setup),
        },
        entity_order: (0..world.bodies.len()).map(|i| format!("b{i}")).collect(),
        entities: Entities(&world.bodies),
        plugins: Plugins {
            ostm: OstmPlugin {
                dims: setup.dims as u8,
                bodies: setup.bodies,
                gravity: world.gravity,
                link: world.link().map(|l| LinkJson {
                    role: l.role as u8,
                    body: l.body,
                    transfer_step: l.transfer_step,
                }),
            },
        },
    })
}

/// The keyframe as indented JSON (with a final newline), for files people read.
pub fn to_json_pretty(world: &World, tick_rate: u32) -> Result<String, ExportError> {
    let d = doc(world, tick_rate)?;
    // Serializing plain structs of integers and strings cannot fail.
    let mut s = serde_json::to_string_pretty(&d).unwrap_or_default();
    s.push('\n');
    Ok(s)
}

/// The keyframe as one line of compact JSON (no newline), for JSON-lines files.
pub fn to_json_line(world: &World, tick_rate: u32) -> Result<String, ExportError> {
    let d = doc(world, tick_rate)?;
    Ok(serde_json::to_string(&d).unwrap_or_default())
}

/// Reads and checks a keyframe file (at most [`MAX_KEYFRAME_BYTES`]).
pub fn read_file(path: &Path) -> Result<Keyframe, FormatError> {
    let name = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|e| FormatError::io(&name, &e))?;
    if meta.len() > MAX_KEYFRAME_BYTES {
        return Err(FormatError::new(
            &name,
            MAX_KEYFRAME_BYTES,
            format!(
                "expected a keyframe of at most {MAX_KEYFRAME_BYTES} bytes, found {} bytes",
                meta.len()
            ),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| FormatError::io(&name, &e))?;
    parse(&name, &bytes)
}

/// Parses and checks a keyframe; `input` names it in errors. Syntax errors carry their
/// byte offset; every other problem names its JSON path (`$.entities.b3.body.vel[1]`)
/// at offset 0.
pub fn parse(input: &str, bytes: &[u8]) -> Result<Keyframe, FormatError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        FormatError::new(
            input,
            byte_offset(bytes, e.line(), e.column()),
            format!("expected JSON: {e}"),
        )
    })?;
    parse_value(input, &value)
}

/// Checks a keyframe already parsed as JSON; errors name the JSON path at offset 0.
pub fn parse_value(input: &str, value: &Value) -> Result<Keyframe, FormatError> {
    from_value(value)
        .map_err(|(path, message)| FormatError::new(input, 0, format!("{path}: {message}")))
}

/// Byte offset of a 1-based line and column as serde_json reports them.
fn byte_offset(bytes: &[u8], line: usize, column: usize) -> u64 {
    let mut at = 0usize;
    for _ in 1..line {
        match bytes[at..].iter().position(|&b| b == b'\n') {
            Some(n) => at += n + 1,
            None => break,
        }
    }
    (at + column.saturating_sub(1)).min(bytes.len()) as u64
}

type Bad = (String, String);

fn bad(path: &str, message: impl Into<String>) -> Bad {
    (path.to_string(), message.into())
}

fn kind_of(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) if s.len() > 40 => "a long string".into(),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(a) => format!("an array of {}", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

fn object<'v>(v: &'v Value, path: &str) -> Result<&'v Map<String, Value>, Bad> {
    v.as_object()
        .ok_or_else(|| bad(path, format!("expected an object, found {}", kind_of(v))))
}

fn get<'v>(m: &'v Map<String, Value>, path: &str, key: &str) -> Result<&'v Value, Bad> {
    m.get(key)
        .ok_or_else(|| bad(&format!("{path}.{key}"), "missing"))
}

fn int(v: &Value, path: &str, lo: i64, hi: i64) -> Result<i64, Bad> {
    match v.as_i64() {
        Some(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(bad(
            path,
            format!("expected an integer in {lo}..={hi}, found {}", kind_of(v)),
        )),
    }
}

fn uint(v: &Value, path: &str, hi: u64) -> Result<u64, Bad> {
    match v.as_u64() {
        Some(n) if n <= hi => Ok(n),
        _ => Err(bad(
            path,
            format!("expected an integer in 0..={hi}, found {}", kind_of(v)),
        )),
    }
}

fn only_keys(m: &Map<String, Value>, path: &str, allowed: &[&str]) -> Result<(), Bad> {
    match m.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(bad(
            &format!("{path}.{k}"),
            format!("unexpected field (expected only {})", allowed.join(", ")),
        )),
        None => Ok(()),
    }
}

fn i32_triple(v: &Value, path: &str) -> Result<[i32; 3], Bad> {
    let a = v.as_array().ok_or_else(|| {
        bad(
            path,
            format!("expected an array of 3 integers, found {}", kind_of(v)),
        )
    })?;
    if a.len() != 3 {
        return Err(bad(
            path,
            format!("expected an array of 3 integers, found {} items", a.len()),
        ));
    }
    let mut out = [0i32; 3];
    for (i, x) in a.iter().enumerate() {
        out[i] = int(x, &format!("{path}[{i}]"), i32::MIN as i64, i32::MAX as i64)? as i32;
    }
    Ok(out)
}

/// A keyframe document, read part by part in the order the errors are checked: the header
/// fields, `plugins.ostm` (the setup, gravity and link), the `rng` state the setup fixes,
/// `entityOrder`, then the bodies; the world is then built through the snapshot reader.
fn from_value(v: &Value) -> Result<Keyframe, Bad> {
    let root = object(v, "$")?;
    only_keys(
        root,
        "$",
        &[
            "kind",
            "v",
            "engine",
            "tick",
            "tickRate",
            "seed",
            "nextEntitySeq",
            "entityOrder",
            "commands",
            "rng",
            "entities",
            "plugins",
        ],
    )?;
    let header = Header::read(root)?;
    let plugin = PluginFields::read(root)?;
    let setup = Setup {
        dims: plugin.dims,
        bodies: plugin.bodies,
        seed: header.seed,
    };
    check_rng(root, &setup)?;
    let n = entity_order(root, header.next_seq)?;
    let bodies = bodies(root, n)?;

    // Build through the snapshot reader: a keyframe accepts exactly what a snapshot does.
    let mut snap = Vec::new();
    let mut w = World::new(setup, plugin.link);
    w.step = header.tick;
    w.gravity = plugin.gravity;
    w.bodies = bodies.into();
    w.write_snapshot(&mut snap);
    let world = World::from_snapshot(setup, plugin.link, "keyframe", &snap, 0)
        .map_err(|e| bad("$.entities", e.message))?;
    Ok(Keyframe {
        world,
        tick_rate: header.tick_rate,
        engine: header.engine,
    })
}

/// The document's top-level scalar fields: `kind`, `v`, `engine`, `tick`, `tickRate`,
/// `seed`, `nextEntitySeq`, and the optional `commands` (which must hold nothing pending).
struct Header {
    engine: String,
    tick: u64,
    tick_rate: u32,
    seed: u32,
    next_seq: u64,
}

impl Header {
    fn read(root: &Map<String, Value>) -> Result<Self, Bad> {
        if get(root, "$", "kind")?.as_str() != Some("keyframe") {
            return Err(bad(
                "$.kind",
                format!("expected \"keyframe\", found {}", kind_of(&root["kind"])),
            ));
        }
        if get(root, "$", "v")?.as_f64() != Some(1.0) {
            return Err(bad(
                "$.v",
                format!("expected 1, found {}", kind_of(&root["v"])),
            ));
        }
        let engine = match get(root, "$", "engine")?.as_str() {
            Some(s) if !s.is_empty() => s.to_string(),
            _ => {
                return Err(bad(
                    "$.engine",
                    format!(
                        "expected a non-empty string, found {}",
                        kind_of(&root["engine"])
                    ),
                ))
            }
        };
        let tick = uint(get(root, "$", "tick")?, "$.tick", MAX_SAFE_INTEGER)?;
        let tick_rate = int(
            get(root, "$", "tickRate")?,
            "$.tickRate",
            1,
            MAX_TICK_RATE as i64,
        )? as u32;
        let seed = uint(get(root, "$", "seed")?, "$.seed", u32::MAX as u64)? as u32;
        let next_seq = uint(
            get(root, "$", "nextEntitySeq")?,
            "$.nextEntitySeq",
            MAX_SAFE_INTEGER,
        )?;
        no_pending_commands(root)?;
        Ok(Header {
            engine,
            tick,
            tick_rate,
            seed,
            next_seq,
        })
    }
}

/// `commands`, when present: an object whose `pending` is an empty array.
fn no_pending_commands(root: &Map<String, Value>) -> Result<(), Bad> {
    if let Some(c) = root.get("commands") {
        let c = object(c, "$.commands")?;
        match c.get("pending").and_then(Value::as_array) {
            Some(p) if p.is_empty() => {}
            _ => {
                return Err(bad(
                    "$.commands.pending",
                    "expected an empty array: the test module keeps no pending commands",
                ))
            }
        }
    }
    Ok(())
}

/// `plugins.ostm`: the dimensions, the initial body count, gravity and the link.
struct PluginFields {
    dims: Dims,
    bodies: u8,
    gravity: i32,
    link: Option<Link>,
}

impl PluginFields {
    fn read(root: &Map<String, Value>) -> Result<Self, Bad> {
        let plugins = object(get(root, "$", "plugins")?, "$.plugins")?;
        let p = object(get(plugins, "$.plugins", PLUGIN)?, "$.plugins.ostm")?;
        only_keys(p, "$.plugins.ostm", &["dims", "bodies", "gravity", "link"])?;
        let dims = match int(
            get(p, "$.plugins.ostm", "dims")?,
            "$.plugins.ostm.dims",
            2,
            3,
        )? {
            2 => Dims::Two,
            _ => Dims::Three,
        };
        let bodies = int(
            get(p, "$.plugins.ostm", "bodies")?,
            "$.plugins.ostm.bodies",
            1,
            MAX_BODIES as i64,
        )? as u8;
        let gravity = int(
            get(p, "$.plugins.ostm", "gravity")?,
            "$.plugins.ostm.gravity",
            i32::MIN as i64,
            i32::MAX as i64,
        )? as i32;
        let link = match get(p, "$.plugins.ostm", "link")? {
            Value::Null => None,
            l => Some(link(l)?),
        };
        Ok(PluginFields {
            dims,
            bodies,
            gravity,
            link,
        })
    }
}

/// `plugins.ostm.link` when not null: `role`, `body` and `transferStep`.
fn link(l: &Value) -> Result<Link, Bad> {
    let lp = "$.plugins.ostm.link";
    let l = object(l, lp)?;
    only_keys(l, lp, &["role", "body", "transferStep"])?;
    let role = Role::from_byte(int(get(l, lp, "role")?, &format!("{lp}.role"), 1, 3)? as u8)
        .unwrap_or(Role::FieldsOnly);
    let body = int(get(l, lp, "body")?, &format!("{lp}.body"), 0, 255)? as u8;
    let transfer_step = int(
        get(l, lp, "transferStep")?,
        &format!("{lp}.transferStep"),
        0,
        u16::MAX as i64,
    )? as u16;
    Ok(Link {
        role,
        body,
        transfer_step,
    })
}

/// `rng`: sfc32, in exactly the state the setup leaves it after drawing the initial bodies.
fn check_rng(root: &Map<String, Value>, setup: &Setup) -> Result<(), Bad> {
    let rng = object(get(root, "$", "rng")?, "$.rng")?;
    only_keys(rng, "$.rng", &["algo", "state"])?;
    if get(rng, "$.rng", "algo")?.as_str() != Some("sfc32") {
        return Err(bad(
            "$.rng.algo",
            format!("expected \"sfc32\", found {}", kind_of(&rng["algo"])),
        ));
    }
    let st = get(rng, "$.rng", "state")?;
    let arr = st.as_array().ok_or_else(|| {
        bad(
            "$.rng.state",
            format!("expected an array of 4 integers, found {}", kind_of(st)),
        )
    })?;
    if arr.len() != 4 {
        return Err(bad(
            "$.rng.state",
            format!("expected 4 words, found {}", arr.len()),
        ));
    }
    let mut state = [0u32; 4];
    for (i, w) in arr.iter().enumerate() {
        state[i] = uint(w, &format!("$.rng.state[{i}]"), u32::MAX as u64)? as u32;
    }
    let want = rng_state(setup);
    if state != want {
        let (seed, initial, dims) = (setup.seed, setup.bodies, setup.dims);
        return Err(bad(
            "$.rng.state",
            format!("expected {want:?}, the sfc32 state of seed {seed} after drawing {initial} initial bodies in {}D, found {state:?}", dims as u8),
        ));
    }
    Ok(())
}

/// `entityOrder`: b0..b(n-1), in order, exactly, with `nextEntitySeq` equal to n.
/// Returns n, the number of bodies.
fn entity_order(root: &Map<String, Value>, next_seq: u64) -> Result<usize, Bad> {
    let order_v = get(root, "$", "entityOrder")?;
    let order = order_v.as_array().ok_or_else(|| {
        bad(
            "$.entityOrder",
            format!("expected an array, found {}", kind_of(order_v)),
        )
    })?;
    if order.is_empty() || order.len() > MAX_BODIES {
        return Err(bad(
            "$.entityOrder",
            format!("expected 1..=64 bodies, found {}", order.len()),
        ));
    }
    for (i, id) in order.iter().enumerate() {
        let want = format!("b{i}");
        if id.as_str() != Some(want.as_str()) {
            return Err(bad(
                &format!("$.entityOrder[{i}]"),
                format!(
                    "expected \"{want}\" (one entity per body slot, in index order), found {}",
                    kind_of(id)
                ),
            ));
        }
    }
    let n = order.len();
    if next_seq != n as u64 {
        return Err(bad(
            "$.nextEntitySeq",
            format!("expected {n}, the index the next spawned body takes, found {next_seq}"),
        ));
    }
    Ok(n)
}

/// `entities`: exactly b0..b(n-1), each read by [`entity`].
fn bodies(root: &Map<String, Value>, n: usize) -> Result<Vec<Body>, Bad> {
    let entities = object(get(root, "$", "entities")?, "$.entities")?;
    if let Some(k) = entities.keys().find(|k| {
        !k.strip_prefix('b')
            .and_then(|d| d.parse::<usize>().ok())
            .is_some_and(|i| i < n && format!("b{i}") == **k)
    }) {
        return Err(bad(
            &format!("$.entities.{k}"),
            format!("unexpected entity: entityOrder lists b0..b{}", n - 1),
        ));
    }
    let mut bodies = Vec::with_capacity(n);
    for i in 0..n {
        bodies.push(entity(entities, i)?);
    }
    Ok(bodies)
}

/// `entities.b{i}`: a `transform` (checked for shape only) and the `body` it carries.
fn entity(entities: &Map<String, Value>, i: usize) -> Result<Body, Bad> {
    let ep = format!("$.entities.b{i}");
    let e = object(
        entities
            .get(&format!("b{i}"))
            .ok_or_else(|| bad(&ep, "missing (listed in entityOrder)"))?,
        &ep,
    )?;
    let tp = format!("{ep}.transform");
    let t = object(get(e, &ep, "transform")?, &tp)?;
    for (key, len) in [("pos", 3), ("rot", 4)] {
        let path = format!("{tp}.{key}");
        let ok = t
            .get(key)
            .and_then(Value::as_array)
            .is_some_and(|a| a.len() == len && a.iter().all(Value::is_number));
        if !ok {
            return Err(bad(&path, format!("expected an array of {len} numbers")));
        }
    }
    let bp = format!("{ep}.body");
    let b = object(get(e, &ep, "body")?, &bp)?;
    only_keys(b, &bp, &["alive", "still", "pos", "vel"])?;
    let alive_v = get(b, &bp, "alive")?;
    let alive = alive_v.as_bool().ok_or_else(|| {
        bad(
            &format!("{bp}.alive"),
            format!("expected a boolean, found {}", kind_of(alive_v)),
        )
    })?;
    let still = uint(
        get(b, &bp, "still")?,
        &format!("{bp}.still"),
        u32::MAX as u64,
    )? as u32;
    let pos = i32_triple(get(b, &bp, "pos")?, &format!("{bp}.pos"))?;
    let vel = i32_triple(get(b, &bp, "vel")?, &format!("{bp}.vel"))?;
    Ok(Body::new(alive, still, pos, vel))
}

/// The hash row of `replay` that a keyframe's `world` stands at (`tick - start step`):
/// the input of that row is the next one to run from it.
///
/// # Errors
/// A message when the world has another setup or link than the replay, or a step outside
/// the replay's steps.
pub fn row_in(replay: &Replay, world: &World) -> Result<usize, String> {
    if world.setup() != replay.setup || world.link() != replay.link {
        return Err(format!(
            "the keyframe's setup ({}) is not the replay's ({})",
            crate::format::trace::setup_line(&world.setup(), world.link()),
            crate::format::trace::setup_line(&replay.setup, replay.link)
        ));
    }
    let start = replay.start_step();
    let end = replay.end_step();
    replay.row_of(world.step).ok_or_else(|| {
        format!(
            "the keyframe's tick {} is outside the replay's steps {start}..={end}",
            world.step
        )
    })
}

/// Runs `replay` on from a keyframe's world: the world must have the replay's setup and
/// link and a step within the replay; rows from that step on are compared, numbered as in
/// the file. This is what `verify --from-keyframe` and a host serving from a keyframe use.
///
/// # Errors
/// A message when the keyframe does not belong to the replay.
pub fn verify_from(replay: &Replay, world: World) -> Result<Verdict, String> {
    let first = row_in(replay, &world)?;
    Ok(replay.verify_from_row(world, first, |_| {}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::op::Op;

    fn sample() -> World {
        let mut w = World::new(
            Setup {
                dims: Dims::Three,
                bodies: 5,
                seed: 42,
            },
            None,
        );
        for i in 0..100 {
            let ops = match i {
                10 => vec![Op::Remove { body: 2 }],
                20 => vec![
                    Op::Spawn {
                        pos: [100, 200, 300],
                    },
                    Op::Gravity { g: 5 },
                ],
                _ => vec![],
            };
            w.step(&ops);
        }
        w
    }

    #[test]
    fn rng_state_is_the_state_after_the_initial_bodies() {
        // Draw the bodies by hand in the documented order and compare with World::new.
        for dims in [Dims::Two, Dims::Three] {
            let setup = Setup {
                dims,
                bodies: 7,
                seed: 1234,
            };
            let w = World::new(setup, None);
            let mut rng = Sfc32::from_seed(setup.seed);
            let axes = dims.axes();
            for b in &w.bodies {
                for a in 0..axes {
                    assert_eq!(b.pos[a], rng.range(500, 9500));
                }
                for a in 0..axes {
                    assert_eq!(b.vel[a], rng.range(-40, 40));
                }
            }
            assert_eq!(rng.state, rng_state(&setup));
        }
        // Computed independently (a Python sfc32 from the rule in docs/keyframe.md).
        let setup = Setup {
            dims: Dims::Three,
            bodies: 2,
            seed: 11,
        };
        assert_eq!(rng_state(&setup), [3380488016, 2318328558, 3422650011, 35]);
    }

    #[test]
    fn a_keyframe_reads_back_to_the_same_world() {
        let w = sample();
        for text in [
            to_json_pretty(&w, 60).unwrap(),
            to_json_line(&w, 30).unwrap(),
        ] {
            let k = parse("k", text.as_bytes()).unwrap();
            assert_eq!(k.world, w);
        }
    }

    #[test]
    fn malformed_keyframes_name_the_json_path() {
        let good: Value = serde_json::from_str(&to_json_line(&sample(), 60).unwrap()).unwrap();
        type Plant = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(&str, Plant)> = vec![
            (
                "$.tick: missing",
                Box::new(|v| drop(v.as_object_mut().unwrap().remove("tick"))),
            ),
            (
                "$.entities.b3.body.vel[1]: expected an integer",
                Box::new(|v| v["entities"]["b3"]["body"]["vel"][1] = "x".into()),
            ),
            (
                "$.entities.b0.body.alive: expected a boolean",
                Box::new(|v| v["entities"]["b0"]["body"]["alive"] = 1.into()),
            ),
            (
                "$.entityOrder[1]: expected \"b1\"",
                Box::new(|v| v["entityOrder"].as_array_mut().unwrap().swap(1, 2)),
            ),
            (
                "$.entityOrder: expected 1..=64 bodies, found 65",
                Box::new(|v| {
                    let a = v["entityOrder"].as_array_mut().unwrap();
                    while a.len() < 65 {
                        let n = a.len();
                        a.push(format!("b{n}").into());
                    }
                }),
            ),
            (
                "$.nextEntitySeq: expected 6",
                Box::new(|v| v["nextEntitySeq"] = 7.into()),
            ),
            (
                "$.rng.state: expected",
                Box::new(|v| v["rng"]["state"][0] = 1.into()),
            ),
            (
                "$.entities.b6: unexpected entity",
                Box::new(|v| v["entities"]["b6"] = v["entities"]["b0"].clone()),
            ),
            (
                "$.plugins.ostm.dims: expected an integer in 2..=3",
                Box::new(|v| v["plugins"]["ostm"]["dims"] = 4.into()),
            ),
            (
                "$.tickRate: expected an integer in 1..=240",
                Box::new(|v| v["tickRate"] = 0.into()),
            ),
        ];
        for (want, plant) in cases {
            let mut v = good.clone();
            plant(&mut v);
            let e = parse("k.json", v.to_string().as_bytes()).unwrap_err();
            assert!(e.message.starts_with(want), "wanted {want:?}, got {e}");
            assert_eq!(e.input, "k.json");
        }
        // The unplanted document passes, so each refusal above is the plant's doing.
        assert!(parse("k.json", good.to_string().as_bytes()).is_ok());
    }

    #[test]
    fn a_keyframe_continues_exactly_like_the_original_at_several_steps() {
        let mut r = Replay::new(
            Setup {
                dims: Dims::Two,
                bodies: 9,
                seed: 31,
            },
            None,
        );
        for i in 0..600 {
            let ops = match i % 97 {
                0 => vec![Op::Impulse {
                    body: (i % 9) as u8,
                    d: [70, 90, 0],
                }],
                13 => vec![Op::Spawn {
                    pos: [5000, 8000, 0],
                }],
                _ => vec![],
            };
            r.inputs.push_ops(&ops);
        }
        r.compute_hashes();
        let mut w = r.start_world();
        for at in [0usize, 1, 97, 110, 333, 599, 600] {
            while (w.step as usize) < at {
                w.step(&r.inputs.ops(w.step as usize));
            }
            let k = parse("k", to_json_line(&w, 60).unwrap().as_bytes()).unwrap();
            assert_eq!(
                verify_from(&r, k.world.clone()),
                Ok(Verdict::Match {
                    final_hash: *r.hashes.as_ref().unwrap().last().unwrap(),
                    rows_checked: (601 - at) as u64
                })
            );
            // A planted one-unit change is caught at the keyframe's own row.
            let mut planted = k.world;
            planted.bodies[0].vel[0] += 1;
            assert!(
                matches!(verify_from(&r, planted), Ok(Verdict::Mismatch { row, .. }) if row == at)
            );
        }
    }

    #[test]
    fn rows_missing_from_a_replay_built_in_code_are_not_checked() {
        let mut r = Replay::new(
            Setup {
                dims: Dims::Three,
                bodies: 2,
                seed: 3,
            },
            None,
        );
        for _ in 0..10 {
            r.inputs.push_ops(&[]);
        }
        r.compute_hashes();
        r.hashes.as_mut().unwrap().truncate(4);
        let w = r.start_world();
        // Rows 0..=3 are compared; rows 4..=10 do not exist and are skipped, not indexed.
        assert!(matches!(
            verify_from(&r, w),
            Ok(Verdict::Match {
                rows_checked: 4,
                ..
            })
        ));
    }

    #[test]
    fn a_keyframe_accepts_exactly_what_a_snapshot_accepts() {
        // A slot with alive = 0 and other fields set, a 2D body with z set, and a link
        // body index with no slot: a snapshot allows all three, so a keyframe does too.
        let setup = Setup {
            dims: Dims::Two,
            bodies: 3,
            seed: 8,
        };
        let link = Some(Link {
            role: Role::Sender,
            body: 200,
            transfer_step: 4,
        });
        let mut w = World::new(setup, link);
        w.bodies[0] = Body::new(false, 9, [1, -2, 3], [4, 5, -6]);
        w.bodies[1].pos[2] = 5;
        w.bodies[1].vel[2] = -7;
        let k = parse("k", to_json_line(&w, 60).unwrap().as_bytes()).unwrap();
        assert_eq!(k.world, w);
        assert_eq!(k.world.snapshot(), w.snapshot());
        // alive stays a boolean: the one body rule both readers keep.
        let mut v: Value = serde_json::from_str(&to_json_line(&w, 60).unwrap()).unwrap();
        v["entities"]["b0"]["body"]["alive"] = 2.into();
        assert!(parse("k", v.to_string().as_bytes()).is_err());
    }

    #[test]
    fn a_syntax_error_carries_its_byte_offset() {
        let e = parse("k", b"{\n  \"kind\": ,\n}").unwrap_err();
        assert_eq!(e.offset, 12);
    }
}

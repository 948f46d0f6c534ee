//! A replay's world at a step, run there with a progress bar on a long run (the commands
//! that draw or measure one step: `render`, `fields`, `compare`).

use ostm_protocol::{Replay, World};

/// The world of `replay` at step `step` ([`Replay::world_at`]), with a progress bar on a
/// long run. Fails with a sentence when the replay does not hold that step.
pub fn world_at(replay: &Replay, step: u64) -> Result<World, String> {
    let n = replay.row_of(step).unwrap_or(0) as u64;
    let bar = crate::progress::bar(n, crate::progress::MIN_STEPS, "running to the step");
    let world = replay.world_at(step, |done| bar.set_position(done as u64));
    bar.finish_and_clear();
    world
}

/// The world at step `step` of the replay in `file`, and the replay; the failure is the
/// sentence to print (the file's name leads a step it does not hold).
pub fn read_world_at(file: &std::path::Path, step: u64) -> Result<(Replay, World), String> {
    let replay = Replay::read_file(file).map_err(|e| e.to_string())?;
    let world = world_at(&replay, step).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok((replay, world))
}

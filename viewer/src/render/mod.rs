//! Pictures of a world at one step (SVG, and PNG through resvg), plus the small helpers
//! the field, ghost and link commands share: running a replay to a step and reading an
//! offset argument.

pub mod labels;
pub mod png;
pub mod svg;

use ostm_protocol::format::ospc::PoseCache;
use ostm_protocol::{Dims, Replay, World};

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

/// A pose cache read for drawing its bodies as ghosts, with the name pictures show.
pub struct GhostCache {
    /// The file's name (without its folders).
    pub name: String,
    pub path: std::path::PathBuf,
    pub cache: PoseCache,
}

impl GhostCache {
    /// The ghost to draw at `step`: the cache's frame there, or a note that it has none.
    pub fn at(&self, step: u64) -> svg::Ghost<'_> {
        match self.cache.frame_at_step(step) {
            Some(poses) => svg::Ghost::Poses {
                name: self.name.clone(),
                poses,
            },
            None => svg::Ghost::NoFrame {
                name: self.name.clone(),
                first: self.cache.start_step(),
                last: self.cache.last_step(),
            },
        }
    }
}

impl GhostCache {
    /// Reads the pose cache at `path`; the failure is the sentence to print.
    pub fn read(path: &std::path::Path) -> Result<GhostCache, String> {
        Ok(GhostCache {
            name: file_name(path),
            path: path.to_path_buf(),
            cache: PoseCache::read_file(path).map_err(|e| e.to_string())?,
        })
    }

    /// Refuses to draw the cache over a world of another dimension count.
    pub fn fits(&self, dims: Dims) -> Result<(), String> {
        if self.cache.dims() != dims {
            return Err(format!(
                "{}: a {}D pose cache cannot be drawn over a {}D world",
                self.path.display(),
                self.cache.dims() as u8,
                dims as u8
            ));
        }
        Ok(())
    }
}

/// Reads the pose cache at `path` for a world of `dims` dimensions ([`GhostCache::read`],
/// [`GhostCache::fits`]).
pub fn read_ghost(path: &std::path::Path, dims: Dims) -> Result<GhostCache, String> {
    let g = GhostCache::read(path)?;
    g.fits(dims)?;
    Ok(g)
}

/// Parses an offset `X,Y` or `X,Y,Z` (millimetres); a 2D world allows no Z but 0.
pub fn parse_offset(text: &str, dims: Dims) -> Result<[i32; 3], String> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    if parts.len() < 2 || parts.len() > 3 {
        return Err(format!(
            "expected an offset X,Y or X,Y,Z in millimetres, found {text:?}"
        ));
    }
    let mut out = [0i32; 3];
    for (o, p) in out.iter_mut().zip(&parts) {
        *o = p.parse().map_err(|_| {
            format!("expected an offset X,Y or X,Y,Z of 32-bit integers, found {text:?}")
        })?;
    }
    if dims == Dims::Two && out[2] != 0 {
        return Err(format!(
            "a 2D world takes an offset X,Y (or X,Y,0), found {text:?}"
        ));
    }
    Ok(out)
}

/// The file name part of a path, for titles.
pub fn file_name(path: &std::path::Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_parse_in_two_and_three_dimensions() {
        assert_eq!(parse_offset("400,0", Dims::Two), Ok([400, 0, 0]));
        assert_eq!(parse_offset("400, -3,0", Dims::Two), Ok([400, -3, 0]));
        assert_eq!(parse_offset("1,2,3", Dims::Three), Ok([1, 2, 3]));
        assert_eq!(parse_offset("1,2", Dims::Three), Ok([1, 2, 0]));
        assert!(parse_offset("1,2,3", Dims::Two).is_err());
        assert!(parse_offset("1", Dims::Two).is_err());
        assert!(parse_offset("1,2,3,4", Dims::Three).is_err());
        assert!(parse_offset("1,x", Dims::Two).is_err());
        assert!(parse_offset("3000000000,0", Dims::Two).is_err());
    }
}

//! A pose cache read for drawing its bodies as ghosts over a world.

use super::{file_name, svg};
use ostm_protocol::format::ospc::PoseCache;
use ostm_protocol::Dims;

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

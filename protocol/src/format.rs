//! The file formats: replays and what is derived from them, each byte for byte in `docs/`.
//!
//! - [`ostm`]: reading and writing `.ostm` replays whole (`docs/replay-format.md`).
//! - [`recording`]: writing a replay step by step, its journal, recovery after a crash.
//! - [`replay_stream`]: reading a replay a step at a time, in constant memory.
//! - [`trace`]: the per-step trace text format (`docs/trace-format.md`).
//! - [`compare`]: the first difference between two runs, traces or replays.
//! - [`bundle`]: the drift bundle (`.ostmb`, `docs/bundle-format.md`).
//! - [`keyframe`]: a world as JSON at a step, and its checks (`docs/keyframe.md`).
//! - [`ospc`]: the pose cache (`docs/pose-cache.md`).
//! - [`seek`]: the seek index beside a replay (`docs/seek-index.md`).

pub mod bundle;
pub mod compare;
pub mod keyframe;
pub mod ospc;
pub mod ostm;
pub mod recording;
pub mod replay_stream;
pub mod seek;
pub mod trace;

/// Writes `bytes` to `path` whole: to `PATH.part`, synced, then renamed over `PATH` and the
/// directory synced, so that a crash leaves `PATH` either as it was or the whole new file.
/// A write that fails (a full disk) removes `PATH.part` and leaves `PATH` as it was.
///
/// # Errors
/// Creating, writing, syncing or renaming fails.
pub fn write_whole(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".part");
    let tmp = std::path::PathBuf::from(tmp);
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.and_then(|()| sync_dir(path))
}

/// Syncs the directory that holds `path`, so that a rename or a new name in it survives a
/// power loss (the file's own sync does not make its name durable).
///
/// # Errors
/// The directory cannot be opened or synced.
pub fn sync_dir(path: &std::path::Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

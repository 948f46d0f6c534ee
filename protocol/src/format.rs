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

/// The name a writer writes `path` under before renaming it into place: `PATH.PID.part`,
/// with this process's id, so that two processes writing the same `PATH` (two viewers in
/// one directory) never write into each other's file.
pub fn part_path(path: &std::path::Path) -> std::path::PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.part", std::process::id()));
    std::path::PathBuf::from(tmp)
}

/// Writes `bytes` to [`part_path`] and syncs it; a write that fails removes it.
fn write_part(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<std::path::PathBuf> {
    use std::io::Write;
    let tmp = part_path(path);
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    match written {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Writes `bytes` to `path` whole: to `PATH.PID.part` ([`part_path`]), synced, then renamed
/// over `PATH` and the directory synced, so that a crash leaves `PATH` either as it was or
/// the whole new file. A write that fails (a full disk) removes `PATH.PID.part` and leaves
/// `PATH` as it was.
///
/// # Errors
/// Creating, writing, syncing or renaming fails.
pub fn write_whole(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = write_part(path, bytes)?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(path)
}

/// The `n`-th name [`write_new`] tries for `path` (`n` from 1): `path` itself, then
/// `STEM-2.EXT`, `STEM-3.EXT`, … (`drift-1800.ostmb`, `drift-1800-2.ostmb`; a name without
/// extension gets `-2`, `-3`, …).
pub fn nth_free_name(path: &std::path::Path, n: u32) -> std::path::PathBuf {
    if n <= 1 {
        return path.to_path_buf();
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}-{n}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{n}"),
    };
    path.with_file_name(name)
}

/// How many names [`write_new`] tries before it gives up.
pub const FREE_NAME_TRIES: u32 = 1000;

/// Writes `bytes` whole, as [`write_whole`] does, under a name the writer picks itself that
/// must not replace anything: `path` if no file has it, else the next free name of
/// [`nth_free_name`]. The name is taken by a hard link from `PATH.PID.part`, which fails
/// rather than replace a file that exists, so that two processes writing the same name at
/// once each get a name of their own. Returns the name written.
///
/// # Errors
/// Creating, writing or syncing fails, or the first [`FREE_NAME_TRIES`] names are all taken.
pub fn write_new(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<std::path::PathBuf> {
    let tmp = write_part(path, bytes)?;
    let mut taken = Ok(());
    for n in 1..=FREE_NAME_TRIES {
        let name = nth_free_name(path, n);
        match std::fs::hard_link(&tmp, &name) {
            Ok(()) => {
                let _ = std::fs::remove_file(&tmp);
                return sync_dir(&name).map(|()| name);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                taken = Err(e);
                break;
            }
        }
    }
    let _ = std::fs::remove_file(&tmp);
    taken?;
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!(
            "{} and the next {} free names are taken",
            path.display(),
            FREE_NAME_TRIES - 1
        ),
    ))
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

#[cfg(test)]
mod tests {
    use super::{nth_free_name, write_new};
    use std::path::Path;

    #[test]
    fn the_next_free_name_numbers_before_the_extension() {
        let p = Path::new("runs/s.drift-1800.ostmb");
        assert_eq!(nth_free_name(p, 1), p);
        assert_eq!(nth_free_name(p, 2), Path::new("runs/s.drift-1800-2.ostmb"));
        assert_eq!(nth_free_name(Path::new("x"), 3), Path::new("x-3"));
    }

    /// A name taken by another writer (a file that exists) is never replaced: the next
    /// free one is written and returned.
    #[test]
    fn a_new_file_takes_the_next_free_name_and_replaces_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("drift-1800.ostmb");
        std::fs::write(&path, b"the other viewer's").unwrap();
        std::fs::write(dir.path().join("drift-1800-2.ostmb"), b"a third's").unwrap();
        let got = write_new(&path, b"mine").unwrap();
        assert_eq!(got, dir.path().join("drift-1800-3.ostmb"));
        assert_eq!(std::fs::read(&got).unwrap(), b"mine");
        assert_eq!(std::fs::read(&path).unwrap(), b"the other viewer's");
        let first = write_new(&dir.path().join("free.ostmb"), b"new").unwrap();
        assert_eq!(first, dir.path().join("free.ostmb"));
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".part"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}

//! Where a drift report's failure bundle is written: the file side of a drift, which the
//! sans-IO core ([`ostm_protocol::session`]) leaves to the viewer.

use ostm_protocol::session::DriftReport;
use std::path::{Path, PathBuf};

/// Where a drift bundle goes without `--bundle`: beside the recording when there is one
/// (`DIR/STEM.drift-STEP.ostmb` for `--record DIR/STEM.ostm`), else `drift-STEP.ostmb` in
/// the current directory.
pub fn default_bundle_path(record: Option<&Path>, step: u64) -> PathBuf {
    let name = format!("drift-{step}.ostmb");
    match record {
        Some(r) => {
            let stem = r.file_stem().map(|s| s.to_string_lossy().into_owned());
            let name = match stem {
                Some(stem) if !stem.is_empty() => format!("{stem}.{name}"),
                _ => name,
            };
            r.with_file_name(name)
        }
        None => PathBuf::from(name),
    }
}

/// Where a bundle goes: a path the user named (`--bundle`, replaced when it exists), or one
/// the viewer picked itself, which replaces nothing: the next free name is taken instead
/// (`drift-STEP-2.ostmb`, …; `ostm_protocol::format::write_new`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BundleTo {
    Named(PathBuf),
    Picked(PathBuf),
}

impl BundleTo {
    /// The path asked for (the one written, unless a picked name was taken).
    pub fn into_path(self) -> PathBuf {
        match self {
            BundleTo::Named(p) | BundleTo::Picked(p) => p,
        }
    }
}

/// Writes the report's bundle (whole, through `PATH.PID.part`); returns the path written.
///
/// # Errors
/// A message naming the path, or why there is no bundle.
pub fn write_bundle(report: &DriftReport, to: &BundleTo) -> Result<PathBuf, String> {
    let bundle = report
        .bundle
        .as_ref()
        .map_err(|e| format!("no bundle could be made: {e}"))?;
    match to {
        BundleTo::Named(path) => bundle
            .write_file(path)
            .map(|()| path.clone())
            .map_err(|e| format!("{}: {e}", path.display())),
        BundleTo::Picked(path) => bundle
            .write_new_file(path)
            .map_err(|e| format!("{}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::default_bundle_path;
    use std::path::Path;

    #[test]
    fn the_default_bundle_path_is_beside_the_recording_else_here() {
        assert_eq!(
            default_bundle_path(Some(Path::new("runs/s.ostm")), 42),
            Path::new("runs/s.drift-42.ostmb")
        );
        assert_eq!(default_bundle_path(None, 7), Path::new("drift-7.ostmb"));
    }
}

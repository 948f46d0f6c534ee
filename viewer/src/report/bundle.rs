//! What a command prints about a failure bundle it wrote.

use std::path::PathBuf;

/// What became of a bundle: its path, or why it could not be written.
pub type Written = Result<PathBuf, String>;

/// The line printed for a bundle: where it is and the one command that replays it.
pub fn written_line(w: &Written) -> String {
    match w {
        Ok(p) => format!(
            "bundle written: {} (reproduce: ostm-viewer replay {})",
            p.display(),
            p.display()
        ),
        Err(e) => format!("error: no bundle written: {e}"),
    }
}

/// Adds `bundle` (the path, or null) and, when writing failed, `bundle_error` to a JSON
/// result object.
pub fn add_bundle_json(obj: &mut serde_json::Value, w: Option<&Written>) {
    obj["bundle"] = match w {
        Some(Ok(p)) => p.display().to_string().into(),
        _ => serde_json::Value::Null,
    };
    if let Some(Err(e)) = w {
        obj["bundle_error"] = e.clone().into();
    }
}

//! Pictures of a world at one step: SVG ([`svg`], with its [`labels`]), PNG through resvg
//! ([`png`]), and the ghosts a pose cache draws over them ([`ghost`]).

pub mod ghost;
pub mod labels;
pub mod png;
pub mod svg;

/// The file name part of a path, for titles.
pub fn file_name(path: &std::path::Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

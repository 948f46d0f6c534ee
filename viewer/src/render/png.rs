//! Rasterises the SVG picture to PNG with resvg (tiny-skia underneath).
//!
//! Text is drawn with the system's fonts (DejaVu Sans when present, else any sans-serif
//! face fontdb finds). With no fonts at all the PNG is drawn without its text, and a
//! warning says so; the SVG always holds the text.

use resvg::{tiny_skia, usvg};

/// The SVG `svg` as PNG bytes, scaled by `scale` (1 = the SVG's own pixel size).
pub fn to_png(svg: &str, scale: f32) -> Result<Vec<u8>, String> {
    let mut opt = usvg::Options::default();
    opt.fontdb_mut().load_system_fonts();
    if opt.fontdb.is_empty() {
        tracing::warn!("no system fonts found: the PNG is drawn without its text");
    }
    let tree =
        usvg::Tree::from_str(svg, &opt).map_err(|e| format!("cannot parse the picture: {e}"))?;
    let size = tree.size();
    let (w, h) = (
        (size.width() * scale).ceil() as u32,
        (size.height() * scale).ceil() as u32,
    );
    let mut pixmap = tiny_skia::Pixmap::new(w, h)
        .ok_or_else(|| format!("cannot make a {w} x {h} picture (scale {scale})"))?;
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(scale, scale),
        &mut pixmap.as_mut(),
    );
    pixmap
        .encode_png()
        .map_err(|e| format!("cannot encode the PNG: {e}"))
}

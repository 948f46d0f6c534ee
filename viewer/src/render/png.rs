//! Rasterises the SVG picture to PNG with resvg (tiny-skia underneath).
//!
//! Text is drawn with the font built into the binary (DejaVu Sans and DejaVu Sans Bold,
//! cut down to Latin-1, Greek and common signs: `viewer/assets/fonts/`), and with no
//! other: the system's fonts are never read, so a PNG carries its text on a machine
//! without fonts and looks the same on every machine. A character the font lacks is drawn
//! as blank space, with one warning naming the characters.

use resvg::{tiny_skia, usvg};
use std::collections::BTreeSet;

/// The family name of the built-in faces; the picture asks for it first.
pub const FONT_FAMILY: &str = "DejaVu Sans";
/// DejaVu Sans (weight 400), subset.
const REGULAR: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans-subset.ttf");
/// DejaVu Sans Bold (weight 700), subset.
const BOLD: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans-Bold-subset.ttf");

/// The font database the PNG is drawn with: the two built-in faces, also standing for
/// every generic family (`sans-serif`, and `serif`, usvg's last resort).
pub fn font_db() -> usvg::fontdb::Database {
    let mut db = usvg::fontdb::Database::new();
    db.load_font_data(REGULAR.to_vec());
    db.load_font_data(BOLD.to_vec());
    for set in [
        usvg::fontdb::Database::set_sans_serif_family,
        usvg::fontdb::Database::set_serif_family,
        usvg::fontdb::Database::set_monospace_family,
        usvg::fontdb::Database::set_cursive_family,
        usvg::fontdb::Database::set_fantasy_family,
    ] {
        set(&mut db, FONT_FAMILY);
    }
    db
}

/// The characters of `svg`'s text that no face of `db` has (control characters and
/// white space aside), in code point order.
pub fn missing_chars(svg: &str, db: &usvg::fontdb::Database) -> BTreeSet<char> {
    let wanted: BTreeSet<char> = svg
        .chars()
        .filter(|c| !c.is_control() && !c.is_whitespace())
        .collect();
    let mut missing = wanted;
    for face in db.faces() {
        db.with_face_data(face.id, |data, index| {
            if let Ok(f) = ttf_parser::Face::parse(data, index) {
                missing.retain(|&c| f.glyph_index(c).is_none());
            }
        });
    }
    missing
}

/// A PNG picture: its bytes and its size in pixels.
pub struct Png {
    pub bytes: Vec<u8>,
    pub width: u32,
    pub height: u32,
}

/// The SVG `svg` as a PNG, scaled by `scale` (1 = the SVG's own pixel size).
///
/// # Errors
/// The SVG cannot be parsed, the scaled size is not a picture, or encoding fails.
pub fn to_png(svg: &str, scale: f32) -> Result<Png, String> {
    let mut opt = usvg::Options {
        font_family: FONT_FAMILY.to_string(),
        ..usvg::Options::default()
    };
    *opt.fontdb_mut() = font_db();
    let missing = missing_chars(svg, &opt.fontdb);
    if !missing.is_empty() {
        let list: Vec<String> = missing
            .iter()
            .map(|c| format!("{c:?} (U+{:04X})", *c as u32))
            .collect();
        tracing::warn!(
            "the built-in font has no glyph for {}: left blank in the PNG",
            list.join(", ")
        );
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
    let bytes = pixmap
        .encode_png()
        .map_err(|e| format!("cannot encode the PNG: {e}"))?;
    Ok(Png {
        bytes,
        width: w,
        height: h,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_font_has_both_weights_and_the_pictures_signs() {
        let db = font_db();
        let faces: Vec<_> = db.faces().collect();
        assert_eq!(faces.len(), 2);
        assert!(faces.iter().all(|f| f.families[0].0 == FONT_FAMILY));
        let weights: Vec<u16> = faces.iter().map(|f| f.weight.0).collect();
        assert_eq!(weights, [400, 700]);
        // The picture's own text: digits, letters, and · Σ … (svg.rs).
        assert!(missing_chars("<text>a09Z · Σ … ≤ é</text>", &db).is_empty());
        assert_eq!(
            missing_chars("<text>日x本</text>", &db),
            BTreeSet::from(['日', '本'])
        );
    }
}

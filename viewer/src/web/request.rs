//! What a page may ask (docs/watch.md, "Messages"): one JSON object per WebSocket text
//! message, checked like any other input. A request that does not parse, or names a step,
//! overlay or world that is not there, gets an `error` message on its socket and changes
//! nothing.

use crate::render::svg::Overlay;
use serde::Deserialize;

/// The longest message a page may send, in bytes (longer ones close the socket).
pub const MAX_REQUEST: usize = 4096;

/// A page's request.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Live: the page drew its last frame and can draw another.
    Ready {},
    /// Replay: show the world at this step.
    Show { step: u64 },
    /// Colour the floor with this field.
    Overlay { overlay: OverlayName },
    /// Draw the `--ghost` pose cache, or not.
    Ghost { on: bool },
    /// Live, after a drift: which world to show.
    World { world: DriftWorld },
}

/// An overlay, as the page names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverlayName {
    Density,
    Occupancy,
    None,
}

impl From<OverlayName> for Overlay {
    fn from(o: OverlayName) -> Overlay {
        match o {
            OverlayName::Density => Overlay::Density,
            OverlayName::Occupancy => Overlay::Occupancy,
            OverlayName::None => Overlay::None,
        }
    }
}

/// The worlds a drift report lets the page flip between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftWorld {
    /// The viewer's world at the step before the drift, the last one verified.
    LastVerified,
    /// The viewer's world at the drifting step.
    Viewer,
    /// The host's world at the drifting step, when it sent it.
    Host,
}

impl DriftWorld {
    /// The name in messages.
    pub fn name(self) -> &'static str {
        match self {
            DriftWorld::LastVerified => "last_verified",
            DriftWorld::Viewer => "viewer",
            DriftWorld::Host => "host",
        }
    }
}

/// Parses one text message.
///
/// # Errors
/// A sentence for the page's `error` message: what was expected and where it parted.
pub fn parse(text: &str) -> Result<Request, String> {
    if text.len() > MAX_REQUEST {
        return Err(format!(
            "expected a request of at most {MAX_REQUEST} bytes, found {} bytes",
            text.len()
        ));
    }
    let expected = "expected a request {\"type\": \"ready\" | \"show\" | \"overlay\" | \"ghost\" | \"world\", ...} (docs/watch.md)";
    // JSON first (its errors name the line and column), then the request's form.
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        format!(
            "{expected}, found text that is not JSON, {}: {e}",
            preview(text)
        )
    })?;
    serde_json::from_value(value).map_err(|e| format!("{expected}, found {}: {e}", preview(text)))
}

/// The start of a message, for an error that quotes it.
fn preview(text: &str) -> String {
    let mut end = text.len().min(80);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let more = if end < text.len() { "..." } else { "" };
    format!("{:?}{more}", &text[..end])
}

/// The `error` message (JSON text).
pub fn error_message(why: &str) -> String {
    serde_json::json!({"type": "error", "message": why}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_anything_else_is_refused_with_where() {
        assert_eq!(parse(r#"{"type":"ready"}"#), Ok(Request::Ready {}));
        assert_eq!(
            parse(r#"{"type":"show","step":42}"#),
            Ok(Request::Show { step: 42 })
        );
        assert_eq!(
            parse(r#"{"type":"overlay","overlay":"occupancy"}"#),
            Ok(Request::Overlay {
                overlay: OverlayName::Occupancy
            })
        );
        assert_eq!(
            parse(r#"{"type":"world","world":"last_verified"}"#),
            Ok(Request::World {
                world: DriftWorld::LastVerified
            })
        );
        assert_eq!(
            parse(r#"{"type":"ghost","on":false}"#),
            Ok(Request::Ghost { on: false })
        );
        for bad in [
            "",
            "ready",
            "[1]",
            r#"{"type":"launch"}"#,
            r#"{"type":"show"}"#,
            r#"{"type":"show","step":-1}"#,
            r#"{"type":"show","step":1.5}"#,
            r#"{"type":"show","step":18446744073709551616}"#,
            r#"{"type":"show","step":"3"}"#,
            r#"{"type":"ready","extra":1}"#,
            r#"{"type":"overlay","overlay":"heat"}"#,
            r#"{"type":"ghost","on":"yes"}"#,
            r#"{"type":"world","world":"both"}"#,
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.starts_with("expected a request"), "{bad}: {e}");
        }
        let e = parse(r#"{"type":"show","step":4x}"#).unwrap_err();
        assert!(e.contains("not JSON") && e.contains("column 24"), "{e}");
        let e = parse(r#"{"type":"show","step":-1}"#).unwrap_err();
        assert!(
            e.contains("invalid value: integer `-1`, expected u64"),
            "{e}"
        );
        let long = format!(r#"{{"type":"ready","pad":"{}"}}"#, "é".repeat(3000));
        let e = parse(&long).unwrap_err();
        assert!(e.contains("at most 4096 bytes"), "{e}");
        assert!(preview(&"é".repeat(100)).ends_with("\"..."));
    }
}

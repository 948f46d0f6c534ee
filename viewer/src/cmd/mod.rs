//! One module per subcommand.

pub mod attach;
pub mod check;
pub mod compare;
pub mod fields;
pub mod first_difference;
pub mod follow;
pub mod ghost;
pub mod index;
pub mod inspect;
pub mod keyframe;
pub mod render;
pub mod replay;
pub mod seek;
pub mod trace;
pub mod verify;

/// Logs to stderr through `tracing`, filtered by `RUST_LOG` (default `warn`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

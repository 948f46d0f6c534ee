//! The binaries' stop signal: the simulation itself never sees it.

/// Resolves on Ctrl-C (SIGINT) or SIGTERM, whichever comes first; a signal that cannot be
/// watched never fires. The host and viewer stop cleanly on it: the stream ends with a
/// reason and any recording is finished.
pub async fn stop_signal() {
    let int = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = int => {}
        _ = term => {}
    }
}

/// A flag that Ctrl-C (SIGINT) or SIGTERM sets, for a command that works without an async
/// runtime and checks the flag as it goes (to remove a half-written file before it
/// exits). The handlers are in place when this returns: from then on those signals no
/// longer end the process by themselves. `None` when they cannot be watched.
pub fn stop_flag() -> Option<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    // Registered here, before the thread starts, so no signal slips through.
    #[cfg(unix)]
    let (mut int, mut term) = {
        use tokio::signal::unix::{signal, SignalKind};
        let _guard = rt.enter();
        (
            signal(SignalKind::interrupt()).ok()?,
            signal(SignalKind::terminate()).ok()?,
        )
    };
    let flag = std::sync::Arc::new(AtomicBool::new(false));
    let set = flag.clone();
    std::thread::Builder::new()
        .name("stop-signal".into())
        .spawn(move || {
            rt.block_on(async {
                #[cfg(unix)]
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
                #[cfg(not(unix))]
                stop_signal().await;
            });
            set.store(true, Ordering::SeqCst);
        })
        .ok()?;
    Some(flag)
}

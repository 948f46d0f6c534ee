//! The binaries' stop signal (feature `signal`): the simulation itself never sees it.

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

//! SIGTERM and SIGINT both cancel one token; every loop selects on it.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracing::info;

/// Cancels `token` on the first SIGTERM or SIGINT.
pub fn cancel_on_signals(token: CancellationToken) -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
            _ = token.cancelled() => return,
        };
        info!("{name} received, shutting down");
        token.cancel();
    });
    Ok(())
}

//! SIGTERM and SIGINT: the first cancels one token (every loop selects on it) and starts
//! an orderly stop; a second one ends the process at once, after `on_second` (which stops
//! what must not outlive us, such as an embedded nats-server). Runs still running then die
//! with their supervisors, and the scheduler records them `lost` when their leases expire.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

/// Exit status of a process ended by a second signal: 128 + SIGINT, as shells report it.
pub const FORCED_EXIT: i32 = 130;

/// Cancels `token` on the first SIGTERM or SIGINT; exits on the second.
pub fn cancel_on_signals(token: CancellationToken, on_second: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        // A stop from within (a task's fault) is not the first signal: only signals count.
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        info!("{name} received, shutting down (send it again to stop at once)");
        token.cancel();
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        error!("second {name}: exiting now; runs still running are stopped and recorded lost when their leases expire");
        on_second();
        std::process::exit(FORCED_EXIT);
    });
    Ok(())
}

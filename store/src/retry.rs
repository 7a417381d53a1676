//! Start-up steps that meet NATS trouble are tried again, a pause apart, until a bound
//! from the first try, and give way to the stop at once: the layout a runner waits for,
//! the schedules index another agent is creating, a pool's consumer while a node of the
//! cluster dies. Without it, one timed-out request at start stopped the whole agent.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::Error;

/// How long a step is tried again, and how far apart.
pub struct Patience {
    pub bound: Duration,
    pub pause: Duration,
}

/// `attempt` until it succeeds, fails in a way `forgiven` does not forgive, or
/// `patience.bound` has passed since the first try; `on_forgiven` hears each failure tried
/// again. Each try and each pause is raced with `cancel`: `None` when stopped.
pub async fn retried<T, Fut>(
    patience: Patience,
    cancel: &CancellationToken,
    forgiven: impl Fn(&Error) -> bool,
    mut on_forgiven: impl FnMut(&Error),
    mut attempt: impl FnMut() -> Fut,
) -> Result<Option<T>, Error>
where
    Fut: Future<Output = Result<T, Error>>,
{
    let deadline = tokio::time::Instant::now() + patience.bound;
    loop {
        let tried = tokio::select! {
            _ = cancel.cancelled() => return Ok(None),
            tried = attempt() => tried,
        };
        match tried {
            Ok(value) => return Ok(Some(value)),
            Err(e) if forgiven(&e) && tokio::time::Instant::now() < deadline => on_forgiven(&e),
            Err(e) => return Err(e),
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(None),
            _ = tokio::time::sleep(patience.pause) => {}
        }
    }
}

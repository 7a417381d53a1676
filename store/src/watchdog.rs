//! Long-lived tasks are watched. One that ends or panics while its agent runs is a fault
//! the agent must not hide: it is logged with its cause and the agent stops with an error
//! (a service manager restarts it) rather than going on half-alive: a scheduler without
//! its member list, a runner that no longer pulls. A task whose failure should cost only
//! itself (the dashboard's followers: a panic there must not stop the scheduling, nor
//! crash-loop every agent on the same bad record) is run `restarting` instead.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;
use tokio::task::{Id, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

/// Named tasks, each expected to run until its cancellation token says stop.
#[derive(Default)]
pub struct Watched {
    set: JoinSet<()>,
    names: HashMap<Id, String>,
}

impl Watched {
    pub fn spawn(&mut self, name: impl Into<String>, task: impl Future<Output = ()> + Send + 'static) {
        let handle = self.set.spawn(task);
        self.names.insert(handle.id(), name.into());
    }

    /// Waits until a task ends and says which and how; never returns while none is left.
    /// Cancel-safe, for `select!`.
    pub async fn ended(&mut self) -> String {
        match self.set.join_next_with_id().await {
            Some(Ok((id, ()))) => format!("{} ended", self.name(id)),
            Some(Err(e)) => describe(&self.name(e.id()), e),
            None => std::future::pending().await,
        }
    }

    /// Waits for every task, once they have been told to stop.
    pub async fn join_all(mut self) {
        while let Some(result) = self.set.join_next_with_id().await {
            if let Err(e) = result {
                let name = self.name(e.id());
                tracing::warn!("{}", describe(&name, e));
            }
        }
    }

    fn name(&self, id: Id) -> String {
        self.names.get(&id).cloned().unwrap_or_else(|| "a task".into())
    }
}

/// Runs what `make` makes until it ends or `cancel` is set; one that panics is logged with
/// its cause and made again a second later.
pub async fn restarting<F, Fut>(name: &str, cancel: &CancellationToken, mut make: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            ran = AssertUnwindSafe(make()).catch_unwind() => match ran {
                Ok(()) => return,
                Err(panic) => tracing::error!("{name} panicked: {}; starting it again", panic_message(panic.as_ref())),
            },
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// `<name> panicked: <message>`, or that it was cancelled.
pub fn describe(name: &str, e: JoinError) -> String {
    if !e.is_panic() {
        return format!("{name} was cancelled");
    }
    format!("{name} panicked: {}", panic_message(e.into_panic().as_ref()))
}

/// The message a panic was raised with.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_that_ends_or_panics_is_named_with_its_cause() {
        let mut tasks = Watched::default();
        tasks.spawn("waits", std::future::pending());
        tasks.spawn("the reaper", async { panic!("date overflow") });
        assert_eq!(tasks.ended().await, "the reaper panicked: date overflow");
        tasks.spawn("member list", async {});
        assert_eq!(tasks.ended().await, "member list ended");
        let pending = tokio::time::timeout(std::time::Duration::from_millis(50), tasks.ended()).await;
        assert!(pending.is_err(), "the task still running is not reported");
    }

    #[tokio::test(start_paused = true)]
    async fn a_restarting_task_is_made_again_after_a_panic_until_it_ends() {
        let cancel = CancellationToken::new();
        let mut made = 0;
        let started = tokio::time::Instant::now();
        restarting("the follower", &cancel, || {
            made += 1;
            let panics = made < 3;
            async move { assert!(!panics, "a bad record") }
        })
        .await;
        assert_eq!(made, 3, "made again after each of two panics, then it ended");
        assert!(started.elapsed() >= Duration::from_secs(2), "a second between tries");
        cancel.cancel();
        restarting("the follower", &cancel, || async { panic!("never polled") }).await;
    }
}

//! Kill requests for the runs of this runner, on one subscription for them all
//! (`cronrun.ctl.run.*.*.kill`). A subscription per run cost the server a SUB and an UNSUB
//! at every run (on a cluster, passed on to every route too) and the agent a round of its
//! client each, all at the instants: 1,000 every-second Wasm runs stored their first
//! output line at p99 46-51 ms with it, 42-44 ms without (2026-12-07). Each request goes
//! to the run of its subject if it runs here; a request for a run held elsewhere is not
//! this runner's to answer (`running::kill_request` checks what it asks for).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::RunnerCtx;

/// Requests a run may have waiting: a kill ends its wait for them.
const WAITING_MAX: usize = 4;

/// The runs of this runner that take kill requests, by their kill subject.
#[derive(Default)]
pub(crate) struct Kills {
    runs: Mutex<HashMap<String, mpsc::Sender<async_nats::Message>>>,
}

impl Kills {
    /// The kill requests of the run of `subject` from now until the registration drops.
    pub(super) fn register(self: &Arc<Self>, subject: String) -> Registration {
        let (send, requests) = mpsc::channel(WAITING_MAX);
        self.runs.lock().unwrap_or_else(PoisonError::into_inner).insert(subject.clone(), send);
        Registration { kills: self.clone(), subject, requests }
    }

    /// Hands `request` to its run, if it runs here and can take it.
    fn deliver(&self, request: async_nats::Message) {
        let runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(run) = runs.get(request.subject.as_str()) {
            let _ = run.try_send(request);
        }
    }
}

/// A run's place among those taking kill requests.
pub(super) struct Registration {
    kills: Arc<Kills>,
    subject: String,
    pub(super) requests: mpsc::Receiver<async_nats::Message>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.kills.runs.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.subject);
    }
}

/// Follows the kill requests of every run until `cancel`, handing each to its run. The
/// client keeps the subscription through reconnections; one it ends is a fault (the
/// runner stops, as for its other tasks).
pub(super) async fn follow(ctx: Arc<RunnerCtx>, cancel: CancellationToken) {
    let subject = ctx.store.names.kill_subject("*", "*");
    let mut requests = match ctx.store.client.subscribe(subject).await {
        Ok(requests) => requests,
        Err(e) => return warn!("subscribing to the runs' kill requests: {e}"),
    };
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            request = requests.next() => match request {
                Some(request) => ctx.kills.deliver(request),
                None => return warn!("the runs' kill requests are no longer delivered"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(subject: &str) -> async_nats::Message {
        async_nats::Message {
            subject: subject.into(),
            reply: None,
            payload: "TERM".into(),
            headers: None,
            status: None,
            description: None,
            length: 0,
        }
    }

    /// A request reaches the run of its subject while it is registered, and no other.
    #[tokio::test]
    async fn a_kill_request_reaches_only_the_run_of_its_subject_while_it_runs() {
        let kills = Arc::new(Kills::default());
        let (a, b) = ("cronrun.ctl.run.a.r1.kill", "cronrun.ctl.run.b.r1.kill");
        let mut run_a = kills.register(a.into());
        let mut run_b = kills.register(b.into());
        kills.deliver(request(a));
        assert_eq!(run_a.requests.try_recv().unwrap().subject.as_str(), a);
        assert!(run_b.requests.try_recv().is_err(), "b was sent nothing");
        // Gone: a request for it goes nowhere, the others still reach theirs.
        drop(run_a);
        kills.deliver(request(a));
        kills.deliver(request("cronrun.ctl.run.elsewhere.r9.kill"));
        kills.deliver(request(b));
        assert_eq!(run_b.requests.try_recv().unwrap().subject.as_str(), b);
        assert_eq!(kills.runs.lock().unwrap().len(), 1, "a's place was removed");
        // More requests than a run keeps waiting are dropped, not queued without bound.
        for _ in 0..WAITING_MAX + 3 {
            kills.deliver(request(b));
        }
        let mut waiting = 0;
        while run_b.requests.try_recv().is_ok() {
            waiting += 1;
        }
        assert_eq!(waiting, WAITING_MAX);
    }
}

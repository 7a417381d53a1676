//! A run's secrets kept out of what it says: whatever executes it, its output lines and
//! the text of how it ended (a failure, a guest's returned text) pass through the [`Mask`]
//! of the secrets it resolved before the lifecycle sees them. So the one place that masks
//! is here, ahead of everything that publishes or keeps output: the live log on
//! `<ns>.logs.<job>.<run-id>` (and so `cronrun logs`, the dashboard, `nats sub`), the run
//! record's tail, its heartbeats, its final error, events and notices made from them.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::{Exit, Outcome, Ready, Running, StartError, Stop};
use crate::output::{Line, Mask};
use crate::spec::secret::SecretValues;

/// Lines between the code and the mask: the lifecycle's own buffer is behind it.
const LINES_IN_FLIGHT: usize = 64;

/// `ready` with its output and end masked by the values of `secrets`; as it is when there
/// is nothing to mask (no secrets, or only values too short to mask).
pub(super) fn masked(ready: Box<dyn Ready>, secrets: &SecretValues) -> Box<dyn Ready> {
    let mask = Mask::new(secrets.values().map(String::as_str));
    if mask.is_empty() {
        return ready;
    }
    Box::new(MaskedReady { inner: ready, mask: Arc::new(mask) })
}

struct MaskedReady {
    inner: Box<dyn Ready>,
    mask: Arc<Mask>,
}

#[async_trait]
impl Ready for MaskedReady {
    /// Starts the code with its lines going through the mask, in order, into `output`.
    async fn start(self: Box<Self>, output: mpsc::Sender<Line>) -> Result<Box<dyn Running>, StartError> {
        let (lines, code_lines) = mpsc::channel(LINES_IN_FLIGHT);
        // Ends when the code's last sender is gone (its readers done), as the lifecycle's
        // own receiver expects of a run's output.
        tokio::spawn(forward(code_lines, output, self.mask.clone()));
        match self.inner.start(lines).await {
            Ok(running) => Ok(Box::new(MaskedRunning { inner: running, mask: self.mask })),
            Err(why) => Err(StartError::Masked(self.mask.apply(&why.to_string()).into_owned())),
        }
    }

    async fn discard(self: Box<Self>) {
        self.inner.discard().await;
    }

    fn bound_to_release(&self) -> bool {
        self.inner.bound_to_release()
    }
}

/// Hands each line of `from` to `to`, masked, until either side is done.
async fn forward(mut from: mpsc::Receiver<Line>, to: mpsc::Sender<Line>, mask: Arc<Mask>) {
    while let Some(mut line) = from.recv().await {
        if let Cow::Owned(masked) = mask.apply(&line.text) {
            line.text = masked;
        }
        if to.send(line).await.is_err() {
            return;
        }
    }
}

struct MaskedRunning {
    inner: Box<dyn Running>,
    mask: Arc<Mask>,
}

impl MaskedRunning {
    /// How the code ended, with the mask over the texts it carries.
    fn masked(&self, exit: Exit) -> Exit {
        let mask = |text: String| self.mask.apply(&text).into_owned();
        let outcome = match exit.outcome {
            Outcome::Succeeded(text) => Outcome::Succeeded(text.map(mask)),
            Outcome::Failed(why) => Outcome::Failed(mask(why)),
            other => other,
        };
        Exit { outcome, ..exit }
    }
}

#[async_trait]
impl Running for MaskedRunning {
    async fn wait(&mut self) -> Exit {
        let exit = self.inner.wait().await;
        self.masked(exit)
    }

    async fn stop(&mut self, how: Stop, grace: Duration) -> Exit {
        let exit = self.inner.stop(how, grace).await;
        self.masked(exit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::Source;

    /// Code that prints `lines` and ends with `outcome`, as an executor would run it.
    struct Scripted {
        lines: Vec<&'static str>,
        outcome: fn() -> Outcome,
    }

    #[async_trait]
    impl Ready for Scripted {
        async fn start(self: Box<Self>, output: mpsc::Sender<Line>) -> Result<Box<dyn Running>, StartError> {
            for text in &self.lines {
                output
                    .send(Line { source: Source::Stdout, text: text.to_string() })
                    .await
                    .map_err(|e| StartError::Masked(e.to_string()))?;
            }
            Ok(Box::new(Ended((self.outcome)())))
        }
        async fn discard(self: Box<Self>) {}
    }

    struct Ended(Outcome);

    #[async_trait]
    impl Running for Ended {
        async fn wait(&mut self) -> Exit {
            Exit { code: Some(1), outcome: std::mem::replace(&mut self.0, Outcome::Stopped) }
        }
        async fn stop(&mut self, _: Stop, _: Duration) -> Exit {
            self.wait().await
        }
    }

    async fn run(ready: Box<dyn Ready>) -> (Vec<String>, Outcome) {
        let (tx, mut rx) = mpsc::channel(16);
        let mut running = ready.start(tx).await.unwrap();
        let exit = running.wait().await;
        drop(running);
        let mut lines = Vec::new();
        while let Some(line) = rx.recv().await {
            lines.push(line.text);
        }
        (lines, exit.outcome)
    }

    /// (secrets, what the code printed and how it ended, what the lifecycle sees): every
    /// line in order and every text of its end masked; nothing changed without secrets.
    #[tokio::test]
    async fn what_a_run_prints_and_how_it_ends_reach_the_lifecycle_masked() {
        let secrets = SecretValues::from([("tok".to_string(), "s3cr3t-t0ken".to_string())]);
        let lines = vec!["token=s3cr3t-t0ken", "plain", "again s3cr3t-t0ken."];
        let failed = || Outcome::Failed("the job said s3cr3t-t0ken".into());
        let (got, outcome) = run(masked(Box::new(Scripted { lines: lines.clone(), outcome: failed }), &secrets)).await;
        assert_eq!(got, ["token=***", "plain", "again ***."]);
        assert!(matches!(&outcome, Outcome::Failed(why) if why == "the job said ***"), "{outcome:?}");
        let returned = || Outcome::Succeeded(Some("done with s3cr3t-t0ken".into()));
        let (_, outcome) = run(masked(Box::new(Scripted { lines: vec![], outcome: returned }), &secrets)).await;
        assert!(matches!(&outcome, Outcome::Succeeded(Some(text)) if text == "done with ***"), "{outcome:?}");
        let (got, _) = run(masked(Box::new(Scripted { lines, outcome: failed }), &SecretValues::new())).await;
        assert_eq!(got[0], "token=s3cr3t-t0ken", "no secrets, nothing masked");
    }
}

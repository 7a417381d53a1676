//! The run a job executes, as the host describes it.

use crate::__private::bindings::cronrun::job::types as wit;

/// Why a run exists (the run record's `trigger`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Trigger {
    /// The schedule fired.
    Schedule,
    /// `cronrun trigger`: run now.
    Manual,
    /// A new attempt after a failed, timed out or lost one.
    Retry,
    /// A missed fire replayed by the catch-up policy.
    Catchup,
}

impl Trigger {
    /// The name used in run records: `schedule`, `manual`, `retry` or `catchup`.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::Manual => "manual",
            Trigger::Retry => "retry",
            Trigger::Catchup => "catchup",
        }
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The run being executed: job name, run id, fire instant, attempt, trigger, config.
#[derive(Debug, Clone)]
pub struct Context {
    job: String,
    run_id: String,
    scheduled_at: String,
    attempt: u32,
    trigger: Trigger,
    config: Vec<(String, String)>,
    traceparent: Option<String>,
}

impl Context {
    /// Builds a context by hand, e.g. to unit-test a job's function on the host.
    pub fn new(job: &str, run_id: &str, scheduled_at: &str, attempt: u32, trigger: Trigger) -> Self {
        Context {
            job: job.to_string(),
            run_id: run_id.to_string(),
            scheduled_at: scheduled_at.to_string(),
            attempt,
            trigger,
            config: Vec::new(),
            traceparent: None,
        }
    }

    /// Sets the W3C trace context (for tests; the host passes the run's).
    pub fn with_traceparent(mut self, traceparent: &str) -> Self {
        self.traceparent = Some(traceparent.to_string());
        self
    }

    /// Adds a config entry (for tests; the host passes the spec's `wasm.config`).
    pub fn with_config(mut self, key: &str, value: &str) -> Self {
        self.config.retain(|(k, _)| k != key);
        self.config.push((key.to_string(), value.to_string()));
        self
    }

    /// The job's name.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The run id, e.g. `20261121T193000Z` (manual runs add `-m<hex>`).
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The fire instant the run belongs to, RFC 3339 UTC, the same for every attempt.
    pub fn scheduled_at(&self) -> &str {
        &self.scheduled_at
    }

    /// [`scheduled_at`](Self::scheduled_at) as whole seconds since the Unix epoch; none
    /// if the host sent something that is not RFC 3339.
    pub fn scheduled_unix_seconds(&self) -> Option<i64> {
        crate::time::parse_rfc3339(&self.scheduled_at).map(|ms| ms.div_euclid(1000))
    }

    /// 1 for the first attempt, 2 for the first retry, and so on.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Why the run exists.
    pub fn trigger(&self) -> Trigger {
        self.trigger
    }

    /// The config value of `key` from the context (no host call), or none.
    pub fn config(&self, key: &str) -> Option<&str> {
        self.config.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Every config entry, sorted by key.
    pub fn config_entries(&self) -> &[(String, String)] {
        &self.config
    }

    /// The run's W3C trace context, `00-<trace id>-<span id>-01`, naming the runner's
    /// span of this run: make the job's own spans its children and they join the run's
    /// trace. None when the runner exports no traces (`[telemetry]` unset). The host
    /// passes it as the guest's `TRACEPARENT` environment variable (the WASI environment:
    /// `cronrun:job@0.1.0` has no field for it), read when the run starts.
    pub fn traceparent(&self) -> Option<&str> {
        self.traceparent.as_deref()
    }

    /// The run's input as JSON text: what `cronrun trigger JOB --input JSON` gave it; none
    /// for a run the schedule started. Every attempt of a run gets the same. This asks the
    /// host (a guest that never calls it does not import it, and runs on older runners).
    pub fn input(&self) -> Option<String> {
        crate::__private::bindings::cronrun::job::input::get()
    }
}

impl From<wit::JobContext> for Context {
    fn from(c: wit::JobContext) -> Self {
        let trigger = match c.trigger {
            wit::Trigger::Schedule => Trigger::Schedule,
            wit::Trigger::Manual => Trigger::Manual,
            wit::Trigger::Retry => Trigger::Retry,
            wit::Trigger::Catchup => Trigger::Catchup,
        };
        Context {
            job: c.job,
            run_id: c.run_id,
            scheduled_at: c.scheduled_at,
            attempt: c.attempt,
            trigger,
            config: c.config,
            traceparent: std::env::var("TRACEPARENT").ok().filter(|v| !v.is_empty()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_made_by_hand_has_a_traceparent_only_when_given_one() {
        let ctx = Context::new("job", "20261121T193000Z", "2026-11-21T19:30:00Z", 1, Trigger::Schedule);
        assert_eq!(ctx.traceparent(), None);
        let tp = "00-6efd78ebf353df77c9b8df331c7ec776-0102030405060708-01";
        assert_eq!(ctx.with_traceparent(tp).traceparent(), Some(tp));
    }
}

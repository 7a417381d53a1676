//! Events on `CRONRUN_EVENTS` (`cronrun.events.<job>.<event>`). The kinds and their wire
//! names are a public contract (docs/nats.md): consumers filter on the subject's
//! last token, so a name never changes once shipped. Most report what happened to a run;
//! `changed`, `removed` and `kill_requested` are the audit trail of CLI writes, with `by`.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use crate::record::Status;

/// What happened to a run. `as_str` is the wire name, the subject's last token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The scheduler (or `trigger`) queued the run for a runner.
    Dispatched,
    /// A runner released the run: its process or guest starts now.
    Started,
    Succeeded,
    Failed,
    TimedOut,
    Cancelled,
    /// The run did not start: overlap, lock, pause, or a missed fire recorded as such.
    Skipped,
    /// A fire found past its starting deadline and not caught up.
    Missed,
    /// The run's runner stopped renewing its lease.
    Lost,
    /// An attempt ended badly and another is queued.
    Retrying,
    /// The job's spec was written (add, apply, deploy, pause, resume); `detail` says how.
    Changed,
    /// The job was removed.
    Removed,
    /// Someone asked for the run to be killed.
    KillRequested,
    /// A notification about the run was delivered; `detail` names the rule's target.
    Notified,
    /// A notification could not be delivered (yet); `detail` says why and whether it is
    /// tried again.
    NotifyFailed,
}

impl EventKind {
    pub const ALL: [EventKind; 15] = [
        EventKind::Dispatched,
        EventKind::Started,
        EventKind::Succeeded,
        EventKind::Failed,
        EventKind::TimedOut,
        EventKind::Cancelled,
        EventKind::Skipped,
        EventKind::Missed,
        EventKind::Lost,
        EventKind::Retrying,
        EventKind::Changed,
        EventKind::Removed,
        EventKind::KillRequested,
        EventKind::Notified,
        EventKind::NotifyFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Dispatched => "dispatched",
            EventKind::Started => "started",
            EventKind::Succeeded => "succeeded",
            EventKind::Failed => "failed",
            EventKind::TimedOut => "timed_out",
            EventKind::Cancelled => "cancelled",
            EventKind::Skipped => "skipped",
            EventKind::Missed => "missed",
            EventKind::Lost => "lost",
            EventKind::Retrying => "retrying",
            EventKind::Changed => "changed",
            EventKind::Removed => "removed",
            EventKind::KillRequested => "kill_requested",
            EventKind::Notified => "notified",
            EventKind::NotifyFailed => "notify_failed",
        }
    }

    /// The event that reports a run reaching `status` (`queued` is `dispatched`, `running`
    /// is `started`).
    pub fn of_status(status: Status) -> EventKind {
        match status {
            Status::Queued => EventKind::Dispatched,
            Status::Running => EventKind::Started,
            Status::Succeeded => EventKind::Succeeded,
            Status::Failed => EventKind::Failed,
            Status::TimedOut => EventKind::TimedOut,
            Status::Lost => EventKind::Lost,
            Status::Cancelled => EventKind::Cancelled,
            Status::Skipped => EventKind::Skipped,
        }
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event's JSON body.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    pub job: String,
    pub run_id: String,
    pub event: EventKind,
    pub attempt: u32,
    pub at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Who made the change, for events of CLI writes (see the runtime's `auth::actor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl Event {
    pub fn new(job: &str, run_id: &str, event: EventKind, attempt: u32, at: DateTime<Utc>) -> Self {
        Self {
            job: job.into(),
            run_id: run_id.into(),
            event,
            attempt,
            at: at.to_rfc3339_opts(SecondsFormat::Millis, true),
            detail: None,
            by: None,
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_are_the_serialized_names_and_final_statuses_keep_their_name() {
        for kind in EventKind::ALL {
            assert_eq!(serde_json::to_value(kind).ok(), Some(serde_json::Value::from(kind.as_str())));
        }
        for (status, kind) in [
            (Status::Queued, EventKind::Dispatched),
            (Status::Running, EventKind::Started),
            (Status::Succeeded, EventKind::Succeeded),
            (Status::TimedOut, EventKind::TimedOut),
        ] {
            assert_eq!(EventKind::of_status(status), kind);
        }
        // A final status is published under its own name.
        for status in
            [Status::Succeeded, Status::Failed, Status::TimedOut, Status::Lost, Status::Cancelled, Status::Skipped]
        {
            assert_eq!(EventKind::of_status(status).as_str(), status.as_str());
        }
    }
}

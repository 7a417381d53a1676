//! The run record kept in `cronrun_runs` under `<job>.<run-id>`, and run ids.
//!
//! A scheduled run's id is its fire instant (`20261121T193000Z`, or with milliseconds
//! `20261121T193000_250Z`), so one fire maps to one key and a second dispatch of the same
//! fire finds the key taken. Manual runs add a random suffix (`...Z-m3f2a`).

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use crate::error::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    Schedule,
    Manual,
    Retry,
    Catchup,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Queued,
    Running,
    Succeeded,
    Failed,
    TimedOut,
    Lost,
    Cancelled,
    Skipped,
}

impl Status {
    pub fn is_final(self) -> bool {
        !matches!(self, Status::Queued | Status::Running)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Running => "running",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::TimedOut => "timed_out",
            Status::Lost => "lost",
            Status::Cancelled => "cancelled",
            Status::Skipped => "skipped",
        }
    }
}

/// Times serialize as RFC 3339 UTC with milliseconds.
mod rfc3339_ms {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Millis, true)),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        Option::<DateTime<Utc>>::deserialize(d)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub job: String,
    pub run_id: String,
    pub attempt: u32,
    pub trigger: Trigger,
    #[serde(with = "rfc3339_ms")]
    pub scheduled_at: Option<DateTime<Utc>>,
    #[serde(with = "rfc3339_ms", default)]
    pub dispatched_at: Option<DateTime<Utc>>,
    #[serde(with = "rfc3339_ms", default)]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(with = "rfc3339_ms", default)]
    pub finished_at: Option<DateTime<Utc>>,
    #[serde(with = "rfc3339_ms", default)]
    pub heartbeat_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub host: Option<String>,
    pub status: Status,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub output: Vec<String>,
    #[serde(default)]
    pub duration_ms: Option<u64>,
    pub spec_revision: u64,
}

impl RunRecord {
    /// A fresh `queued` record.
    pub fn queued(job: &str, run_id: &str, trigger: Trigger, scheduled_at: DateTime<Utc>, spec_revision: u64) -> Self {
        Self {
            job: job.into(),
            run_id: run_id.into(),
            attempt: 1,
            trigger,
            scheduled_at: Some(scheduled_at),
            dispatched_at: None,
            started_at: None,
            finished_at: None,
            heartbeat_at: None,
            host: None,
            status: Status::Queued,
            exit_code: None,
            error: None,
            output: Vec::new(),
            duration_ms: None,
            spec_revision,
        }
    }

    pub fn key(&self) -> String {
        run_key(&self.job, &self.run_id)
    }

    pub fn to_json(&self) -> bytes::Bytes {
        serde_json::to_vec(self).unwrap_or_default().into()
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, Error> {
        serde_json::from_slice(bytes).map_err(|e| Error::invalid("run", format!("unreadable run record: {e}")))
    }
}

/// The KV key of a run: `<job>.<run-id>`.
pub fn run_key(job: &str, run_id: &str) -> String {
    format!("{job}.{run_id}")
}

/// Splits `<job>.<run-id>` as users pass it to `logs` and `kill`.
pub fn parse_run_key(key: &str) -> Result<(&str, &str), Error> {
    match key.split_once('.') {
        Some((job, run)) if !job.is_empty() && !run.is_empty() && !run.contains('.') => Ok((job, run)),
        _ => Err(Error::invalid("run", format!("run {key:?} must be JOB.RUN_ID as shown by `cronrun runs JOB`"))),
    }
}

/// The run id of the fire at `at`.
pub fn fire_run_id(at: DateTime<Utc>) -> String {
    let ms = at.timestamp_subsec_millis();
    if ms == 0 { at.format("%Y%m%dT%H%M%SZ").to_string() } else { format!("{}_{ms:03}Z", at.format("%Y%m%dT%H%M%S")) }
}

/// The run id of a manual trigger at `at`: unique, sorting with the fires around it.
pub fn manual_run_id(at: DateTime<Utc>) -> String {
    let suffix: u16 = rand::random();
    format!("{}-m{suffix:04x}", fire_run_id(at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn run_ids_come_from_fire_times() {
        let t = Utc.with_ymd_and_hms(2026, 11, 21, 19, 30, 0).unwrap();
        assert_eq!(fire_run_id(t), "20261121T193000Z");
        let t2 = t + chrono::Duration::milliseconds(250);
        assert_eq!(fire_run_id(t2), "20261121T193000_250Z");
        assert!(fire_run_id(t) < fire_run_id(t2));
        assert!(manual_run_id(t).starts_with("20261121T193000Z-m"));
    }

    #[test]
    fn run_keys_parse() {
        assert_eq!(parse_run_key("job.20261121T193000Z").unwrap(), ("job", "20261121T193000Z"));
        assert!(parse_run_key("job").is_err());
        assert!(parse_run_key("a.b.c").is_err());
    }

    #[test]
    fn record_times_have_milliseconds() {
        let t = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        let rec = RunRecord::queued("j", &fire_run_id(t), Trigger::Schedule, t, 7);
        let json = String::from_utf8(rec.to_json().to_vec()).unwrap();
        assert!(json.contains("\"scheduled_at\":\"2026-01-02T03:04:05.000Z\""), "{json}");
        assert!(json.contains("\"status\":\"queued\""));
        assert_eq!(RunRecord::from_json(json.as_bytes()).unwrap(), rec);
    }
}

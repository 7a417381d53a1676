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
    /// Started by the end of a run of a job named in the spec's `after`.
    Chain,
    /// Started by a message on the spec's `on.subject`.
    Message,
    /// A past fire run by `cronrun backfill`.
    Backfill,
}

impl Trigger {
    /// The name in run records (serde's), e.g. `schedule`.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::Manual => "manual",
            Trigger::Retry => "retry",
            Trigger::Catchup => "catchup",
            Trigger::Chain => "chain",
            Trigger::Message => "message",
            Trigger::Backfill => "backfill",
        }
    }
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
    /// What the run was given (`cronrun trigger --input`): any JSON, at most
    /// `MAX_INPUT_BYTES` as text. Every attempt of the run gets the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<serde_json::Value>,
}

/// The largest input a run may be given, as compact JSON: it travels in the run record,
/// which must fit NATS's max payload with the output beside it.
pub const MAX_INPUT_BYTES: usize = 64 * 1024;

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
            input: None,
        }
    }

    pub fn key(&self) -> String {
        run_key(&self.job, &self.run_id)
    }

    pub fn to_json(&self) -> Result<bytes::Bytes, Error> {
        let json = serde_json::to_vec(self).map_err(|e| Error::other(&format!("encoding run {}", self.key()), e))?;
        Ok(json.into())
    }

    /// The JSON of this record in at most `max` bytes, as a KV write must be: the error
    /// text is cut at `MAX_ERROR_BYTES`, then the oldest output lines are dropped (one
    /// line says how many) until the encoded record fits. Sizes are measured encoded, so
    /// bytes that JSON escapes six-fold (NUL, control characters) count as they are stored.
    pub fn to_json_within(&self, max: usize) -> Result<bytes::Bytes, Error> {
        let json = self.to_json()?;
        if json.len() <= max && self.error.as_ref().is_none_or(|e| e.len() <= MAX_ERROR_BYTES) {
            return Ok(json);
        }
        let mut fitted = self.clone();
        fitted.fit(max)?;
        fitted.to_json()
    }

    /// Cuts the error text and the oldest output lines so that the record encodes in at
    /// most `max` bytes (see `to_json_within`). Err: the record does not encode at all, so
    /// nothing of it may be stored.
    pub fn fit(&mut self, max: usize) -> Result<(), Error> {
        let lines = std::mem::take(&mut self.output);
        if let Some(error) = &mut self.error {
            cut_at_char(error, MAX_ERROR_BYTES);
        }
        let encoded = |line: &String| serde_json::to_string(line).map_or(0, |s| s.len()) + 1;
        let marker = |dropped: usize| format!("[{dropped} earlier lines dropped to fit the run record]");
        // Room for the marker line at its largest, when there are lines to drop.
        let marker_room = if lines.is_empty() { 0 } else { encoded(&marker(lines.len())) };
        // An error of escaped bytes can still be too large for a small budget: halve it.
        while self.to_json()?.len() + marker_room > max && self.error.as_ref().is_some_and(|e| e.len() > 16) {
            if let Some(error) = &mut self.error {
                cut_at_char(error, error.len() / 2);
            }
        }
        let base = self.to_json()?.len() + marker_room;
        let mut room = max.saturating_sub(base);
        let mut kept = 0;
        for line in lines.iter().rev() {
            match room.checked_sub(encoded(line)) {
                Some(left) => (room, kept) = (left, kept + 1),
                None => break,
            }
        }
        let dropped = lines.len() - kept;
        if dropped > 0 && base <= max {
            self.output.push(marker(dropped));
        }
        self.output.extend(lines.into_iter().skip(dropped));
        Ok(())
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, Error> {
        serde_json::from_slice(bytes).map_err(|e| Error::invalid("run", format!("unreadable run record: {e}")))
    }
}

/// The longest error text a record keeps (a guest's error string is its own to choose).
pub const MAX_ERROR_BYTES: usize = 4096;

/// Cuts `text` to at most `max` bytes on a character boundary, marking the cut.
fn cut_at_char(text: &mut String, max: usize) {
    const MARK: &str = " [cut]";
    if text.len() <= max {
        return;
    }
    let mut end = max.saturating_sub(MARK.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(MARK);
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

/// The run id of the backfill of the fire at `at`: its fire's id and `-b`, apart from the
/// fire's own run (which may have run, or been recorded missed), and the same however
/// often the backfill is repeated, so that it runs each fire once.
pub fn backfill_run_id(at: DateTime<Utc>) -> String {
    format!("{}-b", fire_run_id(at))
}

/// The run id of the run that the end of `upstream_job`'s run `upstream_run` starts in a
/// job chained after it: the upstream fire's time, so that it sorts with the fires around
/// it, and `-c` with a digest of the upstream run's key (FNV-1a, fixed for ever: every
/// agent, of every version, must derive the same id from the same upstream run).
pub fn chain_run_id(upstream_fire: DateTime<Utc>, upstream_job: &str, upstream_run: &str) -> String {
    let digest = run_key(upstream_job, upstream_run)
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    format!("{}-c{digest:016x}", fire_run_id(upstream_fire))
}

/// The run id of the run a message starts: the message's time in its stream and `-s` with
/// its stream sequence, which no other message of the stream has.
pub fn message_run_id(published: DateTime<Utc>, stream_sequence: u64) -> String {
    format!("{}-s{stream_sequence}", fire_run_id(published))
}

/// Whether `run_id` is that of a message's run (`message_run_id`), whatever its attempt.
pub fn is_message_run(run_id: &str) -> bool {
    run_id.rsplit_once("-s").is_some_and(|(_, seq)| !seq.is_empty() && seq.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    #[test]
    fn a_triggers_name_is_the_one_run_records_hold() {
        use Trigger::*;
        for trigger in [Schedule, Manual, Retry, Catchup, Chain, Message, Backfill] {
            assert_eq!(serde_json::to_value(trigger).unwrap(), trigger.as_str(), "{trigger:?}");
        }
    }

    fn with_output(lines: Vec<String>, error: Option<String>) -> RunRecord {
        let t = Utc.with_ymd_and_hms(2026, 11, 21, 19, 30, 0).unwrap();
        let mut r = RunRecord::queued("job", &fire_run_id(t), Trigger::Schedule, t, 7);
        (r.status, r.output, r.error) = (Status::Failed, lines, error);
        r
    }

    #[test]
    fn output_that_json_escapes_badly_is_cut_to_fit_keeping_the_newest_lines() {
        // The default 100 lines of 8 KiB of quotes and NULs: 0.8 MB raw, 3.3 MB encoded.
        let lines: Vec<String> = (0..100).map(|i| format!("{i:03}{}", "\"\0".repeat(4 * 1024 - 2))).collect();
        let record = with_output(lines.clone(), Some("\0".repeat(100_000)));
        assert!(record.to_json().unwrap().len() > 3_000_000);
        let max = 1024 * 1024 - 8 * 1024;
        let json = record.to_json_within(max).unwrap();
        assert!(json.len() <= max, "{} bytes", json.len());
        let back = RunRecord::from_json(&json).unwrap();
        assert_eq!(back.output.last(), lines.last(), "the newest line is kept whole");
        let dropped = 100 - (back.output.len() - 1);
        assert_eq!(back.output[0], format!("[{dropped} earlier lines dropped to fit the run record]"));
        assert_eq!(back.output[1..], lines[dropped..]);
        assert!(back.error.as_ref().unwrap().len() <= MAX_ERROR_BYTES);
        assert!(back.error.unwrap().ends_with(" [cut]"));
        // A record that fits is written as it is.
        let small = with_output(vec!["ok".into()], None);
        assert_eq!(small.to_json_within(max).unwrap(), small.to_json().unwrap());
    }

    proptest! {
        #[test]
        fn every_record_fits_its_budget(
            lines in proptest::collection::vec(".{0,300}", 0..60),
            error in proptest::option::of(".{0,6000}"),
            max in 2_000usize..20_000,
        ) {
            let record = with_output(lines.clone(), error);
            let json = record.to_json_within(max).unwrap();
            prop_assert!(json.len() <= max);
            let back = RunRecord::from_json(&json).unwrap();
            // The newest lines are kept as they were.
            let kept = back.output.iter().filter(|l| !l.ends_with("dropped to fit the run record]")).count();
            prop_assert_eq!(&back.output[back.output.len() - kept..], &lines[lines.len() - kept..]);
        }
    }

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
    fn chain_run_ids_are_fixed_by_the_upstream_run_and_fit_a_token() {
        let t = Utc.with_ymd_and_hms(2026, 11, 21, 19, 30, 0).unwrap() + chrono::TimeDelta::milliseconds(250);
        let long = "j".repeat(128);
        let id = chain_run_id(t, &long, "20261121T193000_250Z-cffffffffffffffff");
        assert_eq!(id, chain_run_id(t, &long, "20261121T193000_250Z-cffffffffffffffff"));
        assert!(id.starts_with("20261121T193000_250Z-c") && id.len() == 38, "{id}");
        // FNV-1a 64 of "a.b" as computed by hand in Python (a changed digest would start chains twice across an upgrade).
        assert_eq!(
            chain_run_id(t - chrono::TimeDelta::milliseconds(250), "a", "b"),
            "20261121T193000Z-ce61d99190466522c"
        );
        let ids: std::collections::HashSet<String> =
            ["a", "b"].iter().flat_map(|j| ["r1", "r2"].map(|r| chain_run_id(t, j, r))).collect();
        assert_eq!(ids.len(), 4);
    }

    #[test]
    fn message_runs_are_known_by_their_id() {
        let t = Utc.with_ymd_and_hms(2026, 11, 21, 19, 30, 0).unwrap();
        assert!(is_message_run(&message_run_id(t, 42)));
        for other in [fire_run_id(t), manual_run_id(t), chain_run_id(t, "a", "b"), format!("{}-s", fire_run_id(t))] {
            assert!(!is_message_run(&other), "{other}");
        }
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
        let json = String::from_utf8(rec.to_json().unwrap().to_vec()).unwrap();
        assert!(json.contains("\"scheduled_at\":\"2026-01-02T03:04:05.000Z\""), "{json}");
        assert!(json.contains("\"status\":\"queued\""));
        assert_eq!(RunRecord::from_json(json.as_bytes()).unwrap(), rec);
    }
}

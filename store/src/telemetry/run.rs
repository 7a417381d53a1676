//! The spans of one run. The tree, every span in the run's trace (`ids.rs`):
//!
//! ```text
//! fire                       scheduler: the fire taken up (or its instant, if earlier) → dispatched
//! └─ dispatch                scheduler: record created, message published (one per attempt)
//!    ├─ claim                runner: message received → the run's code about to start
//!    ├─ run                  runner: the code started → ended (TRACEPARENT's parent)
//!    └─ finish               runner: the final record (or the next attempt) written
//! ```
//!
//! The dispatch's span id reaches the runner in the message's `traceparent` header. A
//! message without one (its dispatcher exports nothing: `cronrun trigger`, a scheduler
//! without `[telemetry]`) has the runner's spans hang from the run's `fire` span id,
//! derived as the scheduler would have.

use std::time::SystemTime;

use chrono::{DateTime, Utc};
use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanId, SpanKind, TraceId};

use super::ids::{Traceparent, random_span_id, run_ids};
use super::{Ended, emit, enabled};
use crate::record::{Status, Trigger};

/// What every span of a run says about it.
fn run_attributes(job: &str, run_id: &str, attempt: u32, trigger: Trigger) -> Vec<KeyValue> {
    vec![
        KeyValue::new("cronrun.job", job.to_string()),
        KeyValue::new("cronrun.run_id", run_id.to_string()),
        KeyValue::new("cronrun.attempt", i64::from(attempt)),
        KeyValue::new("cronrun.trigger", trigger.as_str()),
    ]
}

fn status_attribute(status: Status) -> KeyValue {
    KeyValue::new("cronrun.status", status.as_str())
}

/// The run spans are made for, as its dispatch message names it (`DispatchMsg::traced`):
/// telemetry knows runs, not the messages that carry them.
#[derive(Debug, Clone, Copy)]
pub struct TracedRun<'a> {
    pub job: &'a str,
    pub run_id: &'a str,
    pub attempt: u32,
    pub trigger: Trigger,
    pub scheduled_at: DateTime<Utc>,
}

/// The `fire` span of a run just dispatched for the first time: from the earlier of the
/// instant it was taken up (`taken`) and its scheduled instant (later when dispatched
/// ahead, earlier when the fire is late) to `dispatched`. A backfilled fire's instant is
/// long past: its span starts when it was taken up.
pub fn fire_span(namespace: &str, msg: TracedRun<'_>, taken: DateTime<Utc>, dispatched: SystemTime) {
    if !enabled() {
        return;
    }
    let (trace, fire) = run_ids(namespace, msg.job, msg.run_id);
    let start = match msg.trigger {
        Trigger::Backfill => taken,
        _ => taken.min(msg.scheduled_at),
    };
    let mut attributes = run_attributes(msg.job, msg.run_id, msg.attempt, msg.trigger);
    attributes.push(KeyValue::new("cronrun.scheduled_at", msg.scheduled_at.to_rfc3339()));
    emit(Ended {
        name: "fire",
        trace,
        id: fire,
        parent: SpanId::INVALID,
        remote_parent: false,
        kind: SpanKind::Internal,
        start: start.into(),
        end: dispatched,
        attributes,
        error: None,
    });
}

/// A dispatch being published: its span id goes out in the message's `traceparent`.
pub struct DispatchSpan {
    trace: TraceId,
    fire: SpanId,
    id: SpanId,
    start: SystemTime,
    attributes: Vec<KeyValue>,
}

impl DispatchSpan {
    /// None when telemetry is off: no header, no span.
    pub fn begin(namespace: &str, msg: TracedRun<'_>, start: SystemTime) -> Option<DispatchSpan> {
        if !enabled() {
            return None;
        }
        let (trace, fire) = run_ids(namespace, msg.job, msg.run_id);
        let attributes = run_attributes(msg.job, msg.run_id, msg.attempt, msg.trigger);
        Some(DispatchSpan { trace, fire, id: random_span_id(), start, attributes })
    }

    /// The header value that makes the runner's spans its children.
    pub fn traceparent(&self) -> String {
        Traceparent { trace: self.trace, span: self.id }.to_string()
    }

    /// Ends the span now, failed with `error` if given.
    pub fn end(self, error: Option<String>) {
        emit(Ended {
            name: "dispatch",
            trace: self.trace,
            id: self.id,
            parent: self.fire,
            remote_parent: false,
            kind: SpanKind::Producer,
            start: self.start,
            end: SystemTime::now(),
            attributes: self.attributes,
            error,
        });
    }
}

/// A run on this runner, from its message to its end; inert when telemetry is off.
pub struct RunTrace(Option<Live>);

struct Live {
    trace: TraceId,
    /// The dispatch span (from the header), or the fire span's id.
    parent: SpanId,
    remote_parent: bool,
    /// Chosen ahead: the job is told it (`TRACEPARENT`) before its span starts.
    run: SpanId,
    attributes: Vec<KeyValue>,
    /// When the run should have started (the dispatch's `scheduled_at`), for its lateness.
    due: DateTime<Utc>,
    trigger: Trigger,
    /// When the message came; taken once the claim span is out.
    claim_start: Option<SystemTime>,
}

impl RunTrace {
    /// The trace of the run `d`, received at `received`, its dispatch's `traceparent`
    /// header value if it had one.
    pub fn new(namespace: &str, d: TracedRun<'_>, traceparent: Option<&str>, received: SystemTime) -> RunTrace {
        if !enabled() {
            return RunTrace(None);
        }
        let (trace, fire) = run_ids(namespace, d.job, d.run_id);
        // A header of another trace (someone else's publish) is not believed.
        let header = traceparent.and_then(Traceparent::parse).filter(|tp| tp.trace == trace);
        RunTrace(Some(Live {
            trace,
            parent: header.map_or(fire, |tp| tp.span),
            remote_parent: true,
            run: random_span_id(),
            attributes: run_attributes(d.job, d.run_id, d.attempt, d.trigger),
            due: d.scheduled_at,
            trigger: d.trigger,
            claim_start: Some(received),
        }))
    }

    /// An inert trace (telemetry off), for runs made without a message (tests).
    pub fn off() -> RunTrace {
        RunTrace(None)
    }

    /// `TRACEPARENT` for the job: the run span as the parent of the job's own spans.
    pub fn traceparent(&self) -> Option<String> {
        self.0.as_ref().map(|l| Traceparent { trace: l.trace, span: l.run }.to_string())
    }

    /// Ends the claim span at `at`, unless it has ended: `status` when the run ends
    /// without starting, `error` when the claim ended in trouble.
    pub fn claim_ended(&mut self, at: SystemTime, status: Option<Status>, error: Option<String>) {
        let Some(live) = self.0.as_mut() else { return };
        let Some(start) = live.claim_start.take() else { return };
        let mut attributes = live.attributes.clone();
        attributes.extend(status.map(status_attribute));
        emit(live.span("claim", random_span_id(), SpanKind::Consumer, (start, at), attributes, error));
    }

    /// The run span: the code ran from `started` to `ended`, and the run is `status`.
    pub fn ran(&self, started: DateTime<Utc>, ended: DateTime<Utc>, status: Status, error: Option<&str>) {
        let Some(live) = self.0.as_ref() else { return };
        let mut attributes = live.attributes.clone();
        attributes.push(status_attribute(status));
        // As the lateness histogram has it: a backfilled fire is late by design.
        if live.trigger != Trigger::Backfill {
            attributes.push(KeyValue::new("cronrun.lateness_ms", (started - live.due).num_milliseconds()));
        }
        let error = (status != Status::Succeeded).then(|| error.unwrap_or(status.as_str()).to_string());
        emit(live.span("run", live.run, SpanKind::Internal, (started.into(), ended.into()), attributes, error));
    }

    /// The finish span: the run's end recorded from `start` to now, as `status`.
    pub fn finished(&self, start: SystemTime, status: Status, error: Option<String>) {
        let Some(live) = self.0.as_ref() else { return };
        let mut attributes = live.attributes.clone();
        attributes.push(status_attribute(status));
        let span = (start, SystemTime::now());
        emit(live.span("finish", random_span_id(), SpanKind::Internal, span, attributes, error));
    }
}

impl Live {
    fn span(
        &self,
        name: &'static str,
        id: SpanId,
        kind: SpanKind,
        (start, end): (SystemTime, SystemTime),
        attributes: Vec<KeyValue>,
        error: Option<String>,
    ) -> Ended {
        let (parent, remote_parent) = (self.parent, self.remote_parent);
        Ended { name, trace: self.trace, id, parent, remote_parent, kind, start, end, attributes, error }
    }
}

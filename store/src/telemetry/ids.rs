//! A run's trace identity, and W3C `traceparent`.
//!
//! The trace id and the root (`fire`) span's id are derived from the run itself:
//! SHA-256 of namespace, job and run id, the first 16 bytes the trace id, the next 8 the
//! fire span's id. So every process that touches the run agrees on them without being
//! told: a retry's dispatch, published by whichever scheduler sees the attempt end, joins
//! the trace its first attempt began, and a runner given no header (its dispatcher
//! exports nothing) still files its spans under the run's trace. Deployments that share
//! a collector should not share a namespace: the same job's same fire would be one trace.
//! The other spans' ids are random.

use opentelemetry::trace::{SpanId, TraceId};
use sha2::{Digest, Sha256};

/// The trace id of the run `job`/`run_id` of `namespace`, and the id of its `fire` span.
pub fn run_ids(namespace: &str, job: &str, run_id: &str) -> (TraceId, SpanId) {
    let mut hash = Sha256::new();
    for part in [namespace, job, run_id] {
        hash.update(part.as_bytes());
        // A separator no name holds: ("a", "bc") and ("ab", "c") differ.
        hash.update([0u8]);
    }
    let digest = hash.finalize();
    let mut trace = [0u8; 16];
    let mut span = [0u8; 8];
    trace.copy_from_slice(&digest[..16]);
    span.copy_from_slice(&digest[16..24]);
    // All zeros is invalid in W3C: never in practice, but never sent either.
    trace[15] |= u8::from(trace == [0; 16]);
    span[7] |= u8::from(span == [0; 8]);
    (TraceId::from_bytes(trace), SpanId::from_bytes(span))
}

/// A random span id (never the invalid all-zero one).
pub fn random_span_id() -> SpanId {
    SpanId::from_bytes(rand::random::<u64>().max(1).to_be_bytes())
}

/// A W3C trace context: the trace, and the span a child continues from (version 00,
/// sampled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traceparent {
    pub trace: TraceId,
    pub span: SpanId,
}

impl Traceparent {
    /// Reads a `traceparent` value: `00-<32 hex>-<16 hex>-<2 hex>`, ids not all zero.
    /// Versions other than 00 are read as 00 is (W3C: their first four fields keep their
    /// meaning); `ff` is refused.
    pub fn parse(value: &str) -> Option<Traceparent> {
        let mut parts = value.trim().split('-');
        let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex =
            |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hex(version, 2) || version == "ff" || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
            return None;
        }
        if version == "00" && parts.next().is_some() {
            return None;
        }
        let trace = TraceId::from_hex(trace).ok().filter(|t| *t != TraceId::INVALID)?;
        let span = SpanId::from_hex(span).ok().filter(|s| *s != SpanId::INVALID)?;
        Some(Traceparent { trace, span })
    }
}

impl std::fmt::Display for Traceparent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "00-{:032x}-{:016x}-01", self.trace, self.span)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_ids_are_fixed_by_namespace_job_and_run_and_differ_between_runs() {
        let (trace, fire) = run_ids("cronrun", "backup", "20270115T080000Z");
        assert_eq!((trace, fire), run_ids("cronrun", "backup", "20270115T080000Z"));
        assert_ne!(trace, run_ids("cronrun", "backup", "20270115T080100Z").0);
        assert_ne!(trace, run_ids("other", "backup", "20270115T080000Z").0);
        assert_ne!(run_ids("ns", "ab", "c").0, run_ids("ns", "a", "bc").0);
        // Pinned: schedulers and runners of different versions must agree.
        assert_eq!(format!("{trace:032x}"), "6efd78ebf353df77c9b8df331c7ec776");
    }

    #[test]
    fn a_traceparent_round_trips_and_malformed_ones_are_refused() {
        let (trace, _) = run_ids("cronrun", "backup", "20270115T080000Z");
        let tp = Traceparent { trace, span: SpanId::from_bytes([1, 2, 3, 4, 5, 6, 7, 8]) };
        let text = tp.to_string();
        assert_eq!(text, format!("00-{trace:032x}-0102030405060708-01"));
        assert_eq!(Traceparent::parse(&text), Some(tp));
        let good_trace = format!("{trace:032x}");
        for bad in [
            String::new(),
            "00-abc-def-01".into(),
            format!("ff-{good_trace}-0102030405060708-01"),
            format!("00-{}-0102030405060708-01", "0".repeat(32)),
            format!("00-{good_trace}-0000000000000000-01"),
            format!("00-{}-0102030405060708-01", good_trace.to_uppercase()),
            format!("00-{good_trace}-0102030405060708-01-extra"),
        ] {
            assert_eq!(Traceparent::parse(&bad), None, "{bad}");
        }
    }
}

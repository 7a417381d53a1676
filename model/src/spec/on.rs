//! Message triggers: `on = { subject = "orders.created" }`. Each message published on the
//! subject starts one run of the job, with the message as the run's input (see the
//! runtime's `messages`).

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::names::pattern_covers;

/// The longest trigger subject.
pub const MAX_SUBJECT_LEN: usize = 256;
/// The most runs for messages of one job at once.
pub const MAX_CONCURRENCY: u32 = 1000;
/// The most times one message is run again after its run was lost or skipped.
pub const MAX_REDELIVER: u32 = 100;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnMessage {
    /// The subject whose messages start runs; `*` and `>` wildcards allowed.
    pub subject: String,
    /// Runs for messages of this job at once, across all runners. Default 1. More than
    /// one needs `overlap = "allow"`.
    #[serde(default = "one")]
    pub concurrency: u32,
    /// Times a message is run again when its run is lost (its runner died) or skipped (a
    /// held lock), before it goes to the dead-letter subject. Default 3.
    #[serde(default = "three")]
    pub redeliver: u32,
}

fn one() -> u32 {
    1
}

fn three() -> u32 {
    3
}

impl OnMessage {
    pub fn validate(&self) -> Result<(), Error> {
        if !subject_ok(&self.subject) {
            return Err(Error::invalid(
                "on.subject",
                format!(
                    "on.subject {:?} must be 1 to {MAX_SUBJECT_LEN} bytes of dot-separated tokens without spaces, \
                     `*` a whole token and `>` only the last, e.g. \"orders.created\" or \"orders.>\"",
                    self.subject
                ),
            ));
        }
        if !(1..=MAX_CONCURRENCY).contains(&self.concurrency) {
            return Err(Error::invalid("on.concurrency", format!("on.concurrency must be 1 to {MAX_CONCURRENCY}")));
        }
        if self.redeliver > MAX_REDELIVER {
            return Err(Error::invalid("on.redeliver", format!("on.redeliver must be at most {MAX_REDELIVER}")));
        }
        Ok(())
    }
}

/// A subject a consumer may filter on: tokens of printable ASCII other than space, `*`
/// and `>` only as whole tokens, `>` last; not starting with `$` (the server's own).
pub fn subject_ok(subject: &str) -> bool {
    let tokens: Vec<&str> = subject.split('.').collect();
    let last = tokens.len() - 1;
    (1..=MAX_SUBJECT_LEN).contains(&subject.len())
        && !subject.starts_with('$')
        && tokens.iter().enumerate().all(|(i, t)| {
            !t.is_empty()
                && t.bytes().all(|b| b.is_ascii_graphic())
                && (!t.contains('*') || *t == "*")
                && (!t.contains('>') || (*t == ">" && i == last))
        })
}

/// What starts a job besides its schedule, in words: "after extract succeeded; per message
/// on orders.created"; empty for nothing.
pub fn describe_triggers(after: &[super::after::After], on: Option<&OnMessage>) -> String {
    let on = on.map(|on| format!("per message on {}", on.subject));
    let parts: Vec<String> = [super::after::describe(after)].into_iter().chain(on).filter(|p| !p.is_empty()).collect();
    parts.join("; ")
}

/// The subjects a stream must hold to capture every one of `subjects`: sorted, without
/// repeats, without those another one covers, and with any two that overlap in part
/// (`a.*.c`, `a.b.*`) replaced by one covering both (`a.*.*`): a stream refuses subjects
/// of its own that overlap. What it captures beyond the jobs' subjects has no consumer
/// and is not kept.
pub fn stream_subjects<'a>(subjects: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut all: Vec<String> = subjects.into_iter().map(str::to_string).collect();
    loop {
        all.sort_unstable();
        all.dedup();
        let kept: Vec<String> =
            all.iter().filter(|s| !all.iter().any(|w| w != *s && pattern_covers(w, s))).cloned().collect();
        all = kept;
        let overlapping = (0..all.len())
            .flat_map(|i| (i + 1..all.len()).map(move |j| (i, j)))
            .find(|&(i, j)| crate::names::patterns_intersect(&all[i], &all[j]));
        let Some((i, j)) = overlapping else { return all };
        let wide = widen(&all[i], &all[j]);
        all[i] = wide;
        all.remove(j);
    }
}

/// A subject matching all that `a` and `b` match: tokens that differ become `*`, and from
/// a `>` on, `>`.
fn widen(a: &str, b: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.split('.').collect(), b.split('.').collect());
    let mut out = Vec::new();
    for i in 0..a.len().max(b.len()) {
        match (a.get(i), b.get(i)) {
            (Some(x), Some(y)) if x == y && *x != ">" => out.push(*x),
            (Some(x), Some(y)) if *x != ">" && *y != ">" => out.push("*"),
            _ => {
                out.push(">");
                break;
            }
        }
    }
    out.join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_subjects_are_checked() {
        let cases = [
            ("orders.created", true),
            ("orders.*", true),
            ("orders.>", true),
            (">", true),
            ("orders..created", false),
            ("orders.>.x", false),
            ("orders.cre*", false),
            ("orders created", false),
            ("$JS.API.>", false),
            ("", false),
            ("orders.\u{e9}", false),
        ];
        for (subject, ok) in cases {
            let on = OnMessage { subject: subject.into(), concurrency: 1, redeliver: 3 };
            assert_eq!(on.validate().is_ok(), ok, "{subject:?}");
        }
        let long = OnMessage { subject: "a".repeat(MAX_SUBJECT_LEN + 1), concurrency: 1, redeliver: 3 };
        assert!(long.validate().is_err());
        for (concurrency, redeliver, field) in
            [(0, 3, "on.concurrency"), (1001, 3, "on.concurrency"), (1, 101, "on.redeliver")]
        {
            let e = OnMessage { subject: "a".into(), concurrency, redeliver }.validate().unwrap_err();
            assert!(e.to_string().starts_with(field), "{e}");
        }
    }

    #[test]
    fn a_stream_holds_subjects_covering_every_trigger_without_overlaps() {
        let cases: [(&[&str], &[&str]); 7] = [
            (&["orders.created", "orders.created"], &["orders.created"]),
            (&["orders.created", "orders.*"], &["orders.*"]),
            (&["orders.a.b", "orders.>", "billing.x"], &["billing.x", "orders.>"]),
            (&["a.*.c", "a.b.*"], &["a.*.*"]),
            (&["a.*.c", "a.b.>", "x"], &["a.*.>", "x"]),
            (&["a.*.c", "a.b.*", "a.c.d.e"], &["a.*.*", "a.c.d.e"]),
            (&["a.*", "a.>"], &["a.>"]),
        ];
        for (given, expected) in cases {
            let subjects = stream_subjects(given.iter().copied());
            assert_eq!(subjects, expected, "{given:?}");
            for s in given {
                assert!(subjects.iter().any(|w| pattern_covers(w, s)), "{s} is captured");
            }
        }
        assert!(
            pattern_covers("a.*", "a.b")
                && !pattern_covers("a.*", "a.>")
                && pattern_covers("a.>", "a.*.c")
                && !pattern_covers("a.b", "a.*")
        );
    }
}

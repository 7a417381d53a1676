//! Chains: `after = [{ job = "extract", on = "succeeded" }]`. A run of the upstream job
//! that ends as `on` says starts one run of this job (see the runtime's `chain`).
//!
//! The graph of `after` edges must stay acyclic: a cycle would start runs for ever. Each
//! spec is checked alone by `validate` (no self edge, no repeated upstream); the whole
//! graph by `find_cycle`, which the CLI runs against the stored jobs before any write.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::names::validate_job_name;
use crate::record::Status;

/// The most upstream jobs one job may name.
pub const MAX_AFTER: usize = 16;

/// One upstream job and which of its endings start this job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct After {
    pub job: String,
    /// Default `succeeded`.
    #[serde(default)]
    pub on: AfterOn,
}

/// Which endings of an upstream run start a chained run. Only a run's final ending counts:
/// an attempt that is retried starts nothing until its last attempt ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AfterOn {
    /// The run succeeded.
    #[default]
    Succeeded,
    /// The run failed, timed out or was lost, its retries spent.
    Failed,
    /// Either of the above. A run cancelled (killed, removed) or skipped starts nothing.
    Finished,
}

impl AfterOn {
    pub fn matches(self, status: Status) -> bool {
        let failed = matches!(status, Status::Failed | Status::TimedOut | Status::Lost);
        match self {
            AfterOn::Succeeded => status == Status::Succeeded,
            AfterOn::Failed => failed,
            AfterOn::Finished => failed || status == Status::Succeeded,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AfterOn::Succeeded => "succeeded",
            AfterOn::Failed => "failed",
            AfterOn::Finished => "finished",
        }
    }
}

/// `after` in words: "after extract succeeded, load finished"; empty for none.
pub fn describe(after: &[After]) -> String {
    let each: Vec<String> = after.iter().map(|a| format!("{} {}", a.job, a.on.as_str())).collect();
    if each.is_empty() { String::new() } else { format!("after {}", each.join(", ")) }
}

/// Checks the `after` list of the job `name` on its own.
pub fn validate(name: &str, after: &[After]) -> Result<(), Error> {
    let invalid = |reason: String| Error::invalid("after", reason);
    if after.len() > MAX_AFTER {
        return Err(invalid(format!("after names {} jobs; at most {MAX_AFTER}", after.len())));
    }
    let mut seen = BTreeSet::new();
    for a in after {
        validate_job_name(&a.job).map_err(|e| invalid(format!("after: {e}")))?;
        if a.job == name {
            return Err(invalid(format!("after: job {name:?} cannot run after itself")));
        }
        if !seen.insert(a.job.as_str()) {
            return Err(invalid(format!("after: job {:?} is named twice; give it once with on = \"finished\"", a.job)));
        }
    }
    Ok(())
}

/// A cycle in the graph where each job points at the jobs it runs after, as the path
/// `[a, b, ..., a]`; None when there is none. `graph` maps a job to its upstream jobs.
pub fn find_cycle(graph: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    let mut marks: BTreeMap<&str, Mark> = BTreeMap::new();
    for start in graph.keys() {
        if marks.contains_key(start.as_str()) {
            continue;
        }
        // Depth first without recursion: (job, index of the next upstream to visit).
        let mut path: Vec<(&str, usize)> = vec![(start.as_str(), 0)];
        marks.insert(start, Mark::Open);
        while let Some((job, next)) = path.last_mut() {
            let upstream = graph.get(*job).map(Vec::as_slice).unwrap_or_default();
            let Some(up) = upstream.get(*next) else {
                marks.insert(job, Mark::Done);
                path.pop();
                continue;
            };
            *next += 1;
            match marks.get(up.as_str()) {
                Some(Mark::Done) => {}
                Some(Mark::Open) => {
                    let from = path.iter().position(|(j, _)| *j == up.as_str()).unwrap_or(0);
                    let mut cycle: Vec<String> = path[from..].iter().map(|(j, _)| j.to_string()).collect();
                    cycle.push(up.clone());
                    return Some(cycle);
                }
                None => {
                    marks.insert(up, Mark::Open);
                    path.push((up, 0));
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each job with the jobs it runs after.
    type Edges<'a> = &'a [(&'a str, &'a [&'a str])];

    fn graph(edges: Edges) -> BTreeMap<String, Vec<String>> {
        edges.iter().map(|(j, ups)| (j.to_string(), ups.iter().map(|u| u.to_string()).collect())).collect()
    }

    #[test]
    fn cycles_are_found_and_chains_and_diamonds_are_not_cycles() {
        let cases: &[(Edges, Option<&[&str]>)] = &[
            (&[("b", &["a"]), ("c", &["b"])], None),
            (&[("b", &["a"]), ("c", &["a"]), ("d", &["b", "c"])], None),
            (&[("a", &["b"]), ("b", &["a"])], Some(&["a", "b", "a"])),
            (&[("a", &["c"]), ("b", &["a"]), ("c", &["b"]), ("x", &["a"])], Some(&["a", "c", "b", "a"])),
            (&[("a", &["a"])], Some(&["a", "a"])),
            (&[("z", &["y"]), ("y", &["missing"])], None),
        ];
        for (edges, expected) in cases {
            let found = find_cycle(&graph(edges));
            let expected = expected.map(|c| c.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(found, expected, "{edges:?}");
        }
    }

    #[test]
    fn a_long_chain_is_walked_without_recursion() {
        let mut g: BTreeMap<String, Vec<String>> =
            (1..100_000).map(|i| (format!("j{i}"), vec![format!("j{}", i - 1)])).collect();
        assert_eq!(find_cycle(&g), None);
        g.insert("j0".into(), vec!["j99999".into()]);
        assert_eq!(find_cycle(&g).map(|c| c.len()), Some(100_001));
    }

    #[test]
    fn endings_match_as_documented() {
        use Status::*;
        let all = [Queued, Running, Succeeded, Failed, TimedOut, Lost, Cancelled, Skipped];
        let cases: [(AfterOn, &[Status]); 3] = [
            (AfterOn::Succeeded, &[Succeeded]),
            (AfterOn::Failed, &[Failed, TimedOut, Lost]),
            (AfterOn::Finished, &[Succeeded, Failed, TimedOut, Lost]),
        ];
        for (on, starting) in cases {
            for status in all {
                assert_eq!(on.matches(status), starting.contains(&status), "{on:?} {status:?}");
            }
        }
    }

    #[test]
    fn bad_after_lists_are_refused_naming_the_problem() {
        let a = |job: &str| After { job: job.into(), on: AfterOn::Succeeded };
        let too_many: Vec<After> = (0..=MAX_AFTER).map(|i| a(&format!("u{i}"))).collect();
        let cases: [(Vec<After>, Option<&str>); 5] = [
            (vec![a("x"), a("y")], None),
            (vec![a("me")], Some("cannot run after itself")),
            (vec![a("x"), a("x")], Some("named twice")),
            (vec![a("orders.*")], Some("orders.*")),
            (too_many, Some("at most 16")),
        ];
        for (after, expected) in cases {
            let got = validate("me", &after);
            match expected {
                None => assert!(got.is_ok(), "{after:?}: {got:?}"),
                Some(text) => {
                    let e = got.expect_err("refused");
                    assert!(e.to_string().contains(text), "{e}");
                }
            }
        }
    }
}

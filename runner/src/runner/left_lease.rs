//! The overlap lease left by a run that ended to its job's next run (`active.<job>`, see
//! `guards` and `waiting`): whether its holder ended for good.

use crate::record::Status;
use crate::store::Store;

/// Whether the run `run_key`, named by its job's overlap lease, ended and so left the
/// lease to the job's next run: its record is final. A run that ends with its job's next
/// fire due within half the lease's TTL leaves it so rather than release it (a write a run
/// fewer, see `finish`). `lost` does not count: the scheduler writes it for a run whose
/// lease ran out, and may queue a retry after it. Every other final status is for good
/// (a retry follows a failed attempt with no final write between), so a replica's answer
/// from its past can only say "not yet", never "ended" of a run in progress, and the
/// lease it read was taken by the attempt that ended (a later attempt takes it anew, at a
/// later revision, which the take-over's compare-and-set refuses). Not known (the record
/// unreadable, not written yet): not ended.
pub(super) async fn left(store: &Store, run_key: &str) -> bool {
    let Ok((job, run_id)) = crate::record::parse_run_key(run_key) else { return false };
    store.get_run(job, run_id).await.is_ok_and(|stored| ended_for_good(stored.record.status))
}

/// A final status no retry follows (see [`left`]).
fn ended_for_good(status: Status) -> bool {
    status.is_final() && status != Status::Lost
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_run_ended_for_good_leaves_its_overlap_lease_to_the_next() {
        use Status::*;
        let cases = [
            (Queued, false),
            (Running, false),
            // The scheduler's, for a run whose lease ran out: a retry may follow.
            (Lost, false),
            (Succeeded, true),
            (Failed, true),
            (TimedOut, true),
            (Cancelled, true),
            (Skipped, true),
        ];
        for (status, left) in cases {
            assert_eq!(ended_for_good(status), left, "{status:?}");
        }
    }
}

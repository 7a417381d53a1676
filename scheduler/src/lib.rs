//! cronrun-scheduler: the triggers, what turns a job into runs. Built on `cronrun-store`;
//! `cronrun-runner` is no dependency of it, nor it of the runner.
//!
//! Layout (one concern per module):
//! - `scheduler`: schedulers share the shards; each shard's leader turns due fires into runs.
//! - `chain`: the end of a run starts the runs of the jobs chained `after` its job.
//! - `messages`: a message on a job's `on` subject starts one run of it.
//! - `notify`: notifications delivered from the event stream.
//! - `trigger`: the kinds of trigger above, and a person's, and their one way out (dispatch).
//! - Re-exported from `cronrun-store` (the modules used here): `store`, `catalog`,
//!   `dispatch`, `events`, `input`, `output`, `metrics`, `clock`, `server_time`, `memory`,
//!   `silence`, `watchdog`; and `schedule`, `model`, `spec`, `record`, `names`, `error`.
pub mod chain;
pub mod messages;
pub mod notify;
pub mod scheduler;
pub mod trigger;

pub use cronrun_model as model;
pub use cronrun_model::{error, names, record, spec};
pub use cronrun_store::{
    catalog, clock, dispatch, events, input, memory, metrics, output, server_time, silence, store, watchdog,
};
pub use cronrun_time as schedule;
pub use error::{Error, ErrorKind};

#[cfg(test)]
mod tests {
    //! Every kind of trigger (`trigger`) stamps its runs with its own kind: here, where
    //! they all meet (from `trigger`, naming `chain` and `messages` would be a circle).

    use chrono::{DateTime, Utc};

    use crate::chain::Chains;
    use crate::messages::MessageTriggers;
    use crate::record;
    use crate::trigger::{Backfill, Catchup, DispatchMsg, Manual, Schedule, Trigger};

    /// A kind's [`Trigger::first`].
    type First = fn(&str, String, DateTime<Utc>, u64) -> DispatchMsg;

    #[test]
    fn each_kind_stamps_its_first_attempts_with_its_record_trigger() {
        let fire = DateTime::from_timestamp(1_795_000_000, 0).expect("in range");
        let kinds: [(&str, First, record::Trigger); 6] = [
            ("schedule", Schedule::first, record::Trigger::Schedule),
            ("catchup", Catchup::first, record::Trigger::Catchup),
            ("manual", Manual::first, record::Trigger::Manual),
            ("backfill", Backfill::first, record::Trigger::Backfill),
            ("chains", Chains::first, record::Trigger::Chain),
            ("message triggers", MessageTriggers::first, record::Trigger::Message),
        ];
        for (kind, first, trigger) in kinds {
            let msg = first("report", "run-1".into(), fire, 7);
            assert_eq!(msg, DispatchMsg::first("report", "run-1".into(), trigger, fire, 7), "{kind}");
            assert_eq!((msg.trigger, msg.attempt, msg.queued, msg.overlap), (trigger, 1, None, None), "{kind}");
        }
    }
}

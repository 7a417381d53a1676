//! Triggers: what turns something that happened into a run of a job. There are four
//! kinds, and one way out:
//!
//! | kind | what it follows | where | its runs' `trigger` |
//! |---|---|---|---|
//! | the schedule | a fire due | `scheduler` (each led shard's leader) | `schedule`, `catchup` |
//! | a chain | the end of a run of a job named in `after` | `chain` | `chain` |
//! | a message | a message on a job's `on` subject | `messages` | `message` |
//! | a person | `cronrun trigger`, `cronrun backfill`, the dashboard | `cronrun::actions`, `cronrun::backfill` | `manual`, `backfill` |
//!
//! Each makes the run's first attempt with [`DispatchMsg::first`] and hands it to
//! `dispatch::dispatch_with_input`, the only way a run starts: it creates the run's record
//! if absent and publishes it to the pool's runners, so that no trigger can start a run
//! twice however often it fires (a retry is the run's next attempt, queued by the runner
//! that saw the last one fail or by the scheduler that saw it lost: `recovery`).
//!
//! The kinds that follow a stream of events, chains and messages, are [`Trigger`]s: the
//! scheduler runs each as one of its watched tasks. The schedule is the scheduler's own
//! work, spread over the shards it leads (`scheduler::membership`); a person's runs
//! follow nothing and need no task.

use std::future::Future;

use tokio_util::sync::CancellationToken;

pub use crate::dispatch::DispatchMsg;
use crate::record;
use crate::watchdog::Watched;

/// A kind of trigger that follows events for as long as the scheduler runs.
pub trait Trigger: Send + 'static {
    /// Its name among the scheduler's watched tasks.
    const TASK: &'static str;
    /// What the records of the runs it starts say started them.
    const KIND: record::Trigger;
    /// Follows what it triggers on until `cancel`, starting runs only through dispatch.
    fn run(self, cancel: CancellationToken) -> impl Future<Output = ()> + Send + 'static;
}

/// Runs `trigger` among `tasks`: ending before `cancel` is the scheduler's fault.
pub fn spawn<T: Trigger>(tasks: &mut Watched, trigger: T, cancel: CancellationToken) {
    tasks.spawn(T::TASK, trigger.run(cancel));
}

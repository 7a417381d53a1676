//! Triggers: what turns something that happened into a run of a job. There are four
//! kinds, each a type implementing [`Trigger`], and one way out:
//!
//! | kind | what it follows | where | its types | its runs' `trigger` |
//! |---|---|---|---|---|
//! | the schedule | a fire due | `scheduler` (each led shard's leader) | [`Schedule`], [`Catchup`] | `schedule`, `catchup` |
//! | a chain | the end of a run of a job named in `after` | `chain` | `chain::Chains` | `chain` |
//! | a message | a message on a job's `on` subject | `messages` | `messages::MessageTriggers` | `message` |
//! | a person | `cronrun trigger`, `cronrun backfill`, the dashboard | `cronrun::actions`, `cronrun::backfill` | [`Manual`], [`Backfill`] | `manual`, `backfill` |
//!
//! Each makes the run's first attempt with [`Trigger::first`] (which stamps the run with
//! the kind's [`Trigger::KIND`]) and hands it to [`Trigger::start`], the only way a run
//! starts: `dispatch::dispatch_with_input` creates the run's record if absent and
//! publishes it to the pool's runners, so that no trigger can start a run twice however
//! often it fires (a retry is the run's next attempt, queued by the runner that saw the
//! last one fail or by the scheduler that saw it lost: `recovery`). A scheduled fire on
//! time is published alone ([`Schedule::start_unrecorded`]): its runner creates the record.
//!
//! The kinds that follow a stream of events, chains and messages, are also [`Follows`]:
//! the scheduler runs each as one of its watched tasks ([`spawn`]). The schedule is the
//! scheduler's own work, spread over the shards it leads (`scheduler::membership`); a
//! person's runs follow nothing and need no task. (The crate root's tests check that each
//! kind stamps its runs with its own `KIND`: naming `chain` and `messages` from here would
//! make a circle of modules.)

use std::future::Future;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

pub use crate::dispatch::DispatchMsg;
use crate::dispatch::{Outcome, dispatch_with_input};
use crate::error::Error;
use crate::record;
use crate::store::Store;
use crate::watchdog::Watched;

/// A kind of trigger: what starts runs, and the one way it starts them.
pub trait Trigger {
    /// What the records of the runs it starts say started them.
    const KIND: record::Trigger;

    /// The first attempt of run `run_id` of `job` (spec `revision`), due at `fire`.
    fn first(job: &str, run_id: String, fire: DateTime<Utc>, revision: u64) -> DispatchMsg {
        DispatchMsg::first(job, run_id, Self::KIND, fire, revision)
    }

    /// Starts the run whose first attempt is `msg` (made by [`Trigger::first`]) on `pool`'s
    /// runners, given `input`: the one way a run starts (see the module's doc).
    fn start<'a>(
        store: &'a Store,
        pool: &'a str,
        msg: &'a DispatchMsg,
        input: Option<serde_json::Value>,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Outcome, Error>> + Send + 'a {
        dispatch_with_input(store, pool, msg, input, now)
    }
}

/// A kind of trigger that follows events for as long as the scheduler runs.
pub trait Follows: Trigger + Send + 'static {
    /// Its name among the scheduler's watched tasks.
    const TASK: &'static str;
    /// Follows what it triggers on until `cancel`, starting runs only through
    /// [`Trigger::start`].
    fn run(self, cancel: CancellationToken) -> impl Future<Output = ()> + Send + 'static;
}

/// Runs `trigger` among `tasks`: ending before `cancel` is the scheduler's fault.
pub fn spawn<T: Follows>(tasks: &mut Watched, trigger: T, cancel: CancellationToken) {
    tasks.spawn(T::TASK, trigger.run(cancel));
}

/// A fire of a job's schedule, due now.
pub struct Schedule;

impl Trigger for Schedule {
    const KIND: record::Trigger = record::Trigger::Schedule;
}

impl Schedule {
    /// [`Trigger::start`] for a fire on time whose record its runner creates (see
    /// `dispatch::dispatch_unrecorded`): the fire's run id, derived from its instant, and
    /// `Nats-Msg-Id` refuse a second dispatch as the record's create would.
    pub async fn start_unrecorded(
        store: &Store,
        pool: &str,
        msg: &DispatchMsg,
        now: DateTime<Utc>,
    ) -> Result<Outcome, Error> {
        crate::dispatch::dispatch_unrecorded(store, pool, msg, now).await?;
        Ok(Outcome::Dispatched)
    }
}

/// A fire of a job's schedule missed while no scheduler ran, run late by its `catchup`.
pub struct Catchup;

impl Trigger for Catchup {
    const KIND: record::Trigger = record::Trigger::Catchup;
}

/// A person asking for a run now: `cronrun trigger`, the dashboard.
pub struct Manual;

impl Trigger for Manual {
    const KIND: record::Trigger = record::Trigger::Manual;
}

/// A person running past fires: `cronrun backfill`.
pub struct Backfill;

impl Trigger for Backfill {
    const KIND: record::Trigger = record::Trigger::Backfill;
}

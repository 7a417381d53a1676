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

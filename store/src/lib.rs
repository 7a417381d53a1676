//! cronrun-store: the NATS contract and store of cronrun, and the plumbing every part of
//! the agent uses. The lowest layer of the agent: `cronrun-scheduler`, `cronrun-runner`
//! and `cronrun` build on it, and it uses none of them.
//!
//! Layout (one concern per module):
//! - `store`: typed access to NATS: layout, compare-and-set, leases, jobs, runs, the
//!   schedules index (the jobs filed by shard by the server).
//! - `catalog`: job summaries read when first needed and kept current; every job's
//!   triggers; every job, for the dashboard.
//! - `dispatch`: create-if-absent record + deduplicated publish of one run; `input`: what
//!   a manual run is given (`trigger --input`), checked against the job's schema.
//! - `events`: publishing on the event stream; `logs`: a run's output read back from
//!   `CRONRUN_LOGS`; `output`: a run's output as bounded lines, the same for every executor.
//! - `metrics`: what /metrics counts; `telemetry`: a trace per run (`[telemetry]`),
//!   exported over OTLP/HTTP; the W3C `traceparent` on dispatch messages and in jobs'
//!   `TRACEPARENT`.
//! - `private_file`: files only their owner may read (seeds, `auth.conf`, a run's input).
//! - `shutdown`: SIGTERM/SIGINT to one cancellation token; `watchdog`: long-lived tasks watched;
//!   `retry`: start-up steps tried again through NATS trouble; `silence`: a bound on the
//!   quiet between a long stream's items.
//! - `clock`: time behind a trait for tests; `server_time`: the agent's clock against the
//!   NATS server's; `memory`: memory freed by a load given back.
//! - Re-exported from the crates below: `schedule` (`cronrun-time`), `model`, `spec`,
//!   `record`, `names`, `error` (`cronrun-model`), `wasm` (`cronrun-wasm`).
pub mod catalog;
pub mod clock;
pub mod dispatch;
pub mod events;
pub mod input;
pub mod logs;
pub mod memory;
pub mod metrics;
pub mod output;
pub mod private_file;
pub mod retry;
pub mod server_time;
pub mod shutdown;
pub mod silence;
pub mod store;
pub mod telemetry;
pub mod watchdog;

pub use cronrun_model as model;
pub use cronrun_model::{error, names, record, spec};
pub use cronrun_time as schedule;
pub use cronrun_wasm as wasm;
pub use error::{Error, ErrorKind};

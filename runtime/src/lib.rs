//! cronrun: distributed cron on NATS JetStream.
//!
//! Layout (one concern per module):
//! - `schedule`: the time engine, crate `cronrun-time` (`time/`, builds without NATS or tokio).
//! - `spec`, `record`, `names`, `error`, `model::event`: crate `cronrun-model` (`model/`),
//!   shared with the SDK's `#[job]` macro.
//! - `store`: typed access to NATS: layout, compare-and-set, leases, jobs, runs, the
//!   schedules index (the jobs filed by shard by the server).
//! - `catalog`: job summaries read when first needed and kept current; every job's
//!   triggers; every job, for the dashboard.
//! - `scheduler`: schedulers share the shards; each shard's leader turns due fires into runs.
//! - `chain`: the end of a run starts the runs of the jobs chained `after` its job;
//!   `messages`: a message on a job's `on` subject starts one run of it.
//! - `dispatch`: create-if-absent record + deduplicated publish of one run; `input`: what
//!   a manual run is given (`trigger --input`), checked against the job's schema.
//! - `runner`: pulls runs and takes each through one lifecycle; executors for shell and Wasm.
//! - `output`: a run's output as bounded lines, the same for every executor.
//! - `wasm`: the Wasm job host, crate `cronrun-wasm` (`wasm/`): wasmtime, sandbox, `wit/`.
//! - `events`: publishing on the event stream; `notify`: notifications delivered from it.
//! - `agent`: scheduler and runner of one host; `config`: `cronrun.toml`.
//! - `http`: the agent's /livez, /readyz and /metrics; `metrics`: what /metrics counts;
//!   `dashboard`: the web UI at `/`, on the same listener.
//! - `telemetry`: a trace per run (`[telemetry]`), exported over OTLP/HTTP; the W3C
//!   `traceparent` on dispatch messages and in jobs' `TRACEPARENT`.
//! - `backfill`: the fires of a past range run now, each once.
//! - `actions`: pause, resume, trigger, kill (CLI and dashboard); `status`: what
//!   `cronrun status` shows; `logs`: a run's output read back from `CRONRUN_LOGS`.
//! - `embedded`: a local nats-server child; `connect`: NATS connections.
//! - `auth`: NATS identities per role and the server's `authorization` block;
//!   `private_file`: files only their owner may read (seeds, `auth.conf`, a run's input).
//! - `cli`: the command line, one file per command.
//! - `shutdown`: SIGTERM/SIGINT to one cancellation token; `supervise`: long-lived tasks watched;
//!   `retry`: start-up steps tried again through NATS trouble; `silence`: a bound on the
//!   quiet between a long stream's items.
//! - `clock`: time behind a trait for tests; `server_time`: the agent's clock against the
//!   NATS server's; `memory`: memory freed by a load given back.
pub mod actions;
pub mod agent;
pub mod auth;
pub mod backfill;
pub mod catalog;
pub mod chain;
pub mod cli;
pub mod clock;
pub mod config;
pub mod connect;
pub mod dashboard;
pub mod dispatch;
pub mod embedded;
pub mod events;
pub mod http;
pub mod input;
pub mod logs;
pub mod memory;
pub mod messages;
pub mod metrics;
pub mod notify;
pub mod output;
pub mod private_file;
pub mod retry;
pub mod runner;
pub mod scheduler;
pub mod server_time;
pub mod shutdown;
pub mod silence;
pub mod status;
pub mod store;
pub mod supervise;
pub mod telemetry;

pub use cronrun_model as model;
pub use cronrun_model::{error, names, record, spec};
pub use cronrun_time as schedule;
pub use cronrun_wasm as wasm;
pub use error::{Error, ErrorKind};

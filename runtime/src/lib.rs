//! cronrun: distributed cron on NATS JetStream.
//!
//! The crates, each using only those above it (`.ci/crate-layers` checks it):
//! - `cronrun-time` (`time/`): the time engine, re-exported as `schedule` (builds without
//!   NATS or tokio).
//! - `cronrun-model` (`model/`): `spec`, `record`, `names`, `error`, `model::event`, shared
//!   with the SDK's `#[job]` macro.
//! - `cronrun-wasm` (`wasm/`): the Wasm job host, re-exported as `wasm`: wasmtime, sandbox,
//!   `wit/`; `cronrun-supervisor` (`supervisor/`): a shell run's first process.
//! - `cronrun-store` (`store/`): the NATS contract and the plumbing every part uses:
//!   `store` (typed NATS access), `catalog`, `dispatch`, `input`, `events`, `logs`,
//!   `output`, `metrics`, `telemetry`, `private_file`, `shutdown`, `watchdog`, `retry`,
//!   `silence`, `clock`, `server_time`, `memory`.
//! - `cronrun-scheduler` (`scheduler/`): the triggers: `scheduler` (shards and their
//!   leaders), `chain` (`after`), `messages` (`on`), `notify` (notifications), `trigger`
//!   (every kind's one way to start a run).
//! - `cronrun-runner` (`runner/`): `runner`, a run's lifecycle and its executors.
//! - `cronrun` (`runtime/`, this crate; every module above is re-exported here by name):
//!   - `agent`: scheduler and runner of one host; `config`: `cronrun.toml`.
//!   - `http`: the agent's /livez, /readyz and /metrics; `dashboard`: the web UI at `/`,
//!     on the same listener.
//!   - `backfill`: the fires of a past range run now, each once.
//!   - `actions`: pause, resume, trigger, kill (CLI and dashboard); `status`: what
//!     `cronrun status` shows.
//!   - `embedded`: a local nats-server child; `connect`: NATS connections.
//!   - `auth`: NATS identities per role and the server's `authorization` block.
//!   - `cli`: the command line, one file per command.
pub mod actions;
pub mod agent;
pub mod auth;
pub mod backfill;
pub mod cli;
pub mod config;
pub mod connect;
pub mod dashboard;
pub mod embedded;
pub mod http;
pub mod status;

pub use cronrun_model as model;
pub use cronrun_model::{error, names, record, spec};
pub use cronrun_runner::runner;
pub use cronrun_scheduler::{chain, messages, notify, scheduler, trigger};
pub use cronrun_store::{
    catalog, clock, dispatch, events, input, logs, memory, metrics, output, private_file, retry, server_time, shutdown,
    silence, store, telemetry, watchdog,
};
pub use cronrun_time as schedule;
pub use cronrun_wasm as wasm;
pub use error::{Error, ErrorKind};

//! cronrun: distributed cron on NATS JetStream.
//!
//! Layout (one concern per module):
//! - `schedule`: the time engine: cron grammar, DST as Debian cron, `@every`, `@at`.
//! - `spec`: the job spec, its validation and the `jobs.toml` file form.
//! - `record`: run records and fire-derived run ids.
//! - `names`: every bucket, stream and subject name, from the namespace.
//! - `store`: typed access to NATS: layout, compare-and-set, leases, jobs, runs.
//! - `catalog`: the live set of job specs, watched from KV.
//! - `scheduler`: schedulers share the shards; each shard's leader turns due fires into runs.
//! - `dispatch`: create-if-absent record + deduplicated publish of one run.
//! - `runner`: pulls runs and executes them (shell jobs in process groups).
//! - `wasm`: the Wasm job host: wasmtime engine, sandbox, host interfaces of `wit/`.
//! - `events`: the event stream.
//! - `agent`: scheduler and runner of one host; `config`: `cronrun.toml`.
//! - `embedded`: a local nats-server child; `connect`: NATS connections.
//! - `cli`: the command line, one file per command.
//! - `shutdown`: SIGTERM/SIGINT to one cancellation token.
//! - `clock`: time behind a trait for tests.
pub mod agent;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod config;
pub mod connect;
pub mod dispatch;
pub mod embedded;
pub mod error;
pub mod events;
pub mod names;
pub mod record;
pub mod runner;
pub mod schedule;
pub mod scheduler;
pub mod shutdown;
pub mod spec;
pub mod store;
pub mod wasm;

pub use error::{Error, ErrorKind};

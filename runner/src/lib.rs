//! cronrun-runner: the runner, which pulls runs and takes each through one lifecycle.
//! Built on `cronrun-store`; `cronrun-scheduler` is no dependency of it, nor it of the
//! schedulers.
//!
//! Layout:
//! - `runner`: claim, lifecycle (prepare, check, arm, release), running, finish; the
//!   executors for shell (`cronrun-supervisor` as a run's first process) and Wasm
//!   (`cronrun-wasm`) behind one trait (`runner/mod.rs` lists its files).
//! - Re-exported from `cronrun-store` (the modules used here): `store`, `catalog`,
//!   `dispatch`, `events`, `output`, `metrics`, `telemetry`, `clock`, `server_time`,
//!   `retry`, `watchdog`, `private_file`; and `model`, `spec`, `record`, `names`, `error`,
//!   `wasm`.
pub mod runner;

pub use cronrun_model as model;
pub use cronrun_model::{error, names, record, spec};
pub use cronrun_store::{
    catalog, clock, dispatch, events, metrics, output, private_file, retry, server_time, store, telemetry, watchdog,
};
pub use cronrun_wasm as wasm;
pub use error::{Error, ErrorKind};

//! The data cronrun keeps in NATS and reads from users, without any I/O.
//!
//! Layout:
//! - `spec`: the job spec, its validation and the `jobs.toml` file form.
//! - `record`: run records and fire-derived run ids.
//! - `event`: the kinds of event published on `CRONRUN_EVENTS`, with their wire names.
//! - `names`: every bucket, stream and subject name, from the namespace.
//! - `jsapi`: the JetStream API a client addresses, its servers' own or a domain's.
//! - `roles`: the NATS permissions of each role, derived from `names`.
//! - `output`: a run's output as bounded lines, and the tail kept for its record.
//! - `error`: the error type every cronrun crate returns.
//! - `shared`: schedules and pool names shared by the jobs with equal ones.
//!
//! The daemon (`runtime/`) and the SDK's `#[job]` macro both validate with this crate, so
//! a name or schedule refused at deploy is refused at compile time too.
pub mod error;
pub mod event;
pub mod jsapi;
pub mod names;
pub mod output;
pub mod record;
pub mod roles;
pub mod shared;
pub mod spec;

pub use error::{Error, ErrorKind};

//! Write cronrun jobs as WebAssembly components.
//!
//! A job is a `cdylib` crate built for `wasm32-wasip2` with one function marked
//! [`#[job]`](macro@job). The attribute carries the job's schedule and policy, exports the
//! function as the component's `run` (WIT world `cronrun:job/job`, in `wit/` of the
//! repository) and embeds those settings as JSON in a custom section named
//! `cronrun-manifest`, so `cronrun deploy` can create the job from the file alone.
//!
//! ```no_run
//! use cronrun_sdk::{Context, config, kv, log};
//!
//! /// Greets every five minutes and counts its runs.
//! #[cronrun_sdk::job(schedule = "0 */5 * * * *", timezone = "UTC", timeout = "30s", overlap = "skip")]
//! fn run(ctx: &Context) -> Result<Option<String>, String> {
//!     let greeting = config::get("greeting").unwrap_or_else(|| "hello".to_string());
//!     log::info!("{greeting} from {} (run {}, attempt {})", ctx.job(), ctx.run_id(), ctx.attempt());
//!
//!     // The job's own key-value store (needs `allow_kv = true` in the spec).
//!     let runs = kv::get("runs")?
//!         .and_then(|v| String::from_utf8(v).ok())
//!         .and_then(|s| s.parse::<u64>().ok())
//!         .unwrap_or(0)
//!         + 1;
//!     kv::set("runs", runs.to_string().as_bytes())?;
//!     Ok(Some(format!("run number {runs}")))
//! }
//! ```
//!
//! `Cargo.toml` of such a job:
//!
//! ```toml
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! cronrun-sdk = "0.1"
//! ```
//!
//! Build and deploy it (see `sdk/README.md`):
//!
//! ```sh
//! cargo build --release --target wasm32-wasip2
//! cronrun deploy target/wasm32-wasip2/release/hello.wasm
//! ```
//!
//! What a job may use: [`log`] lines (the run's output), [`config`] values and the
//! [`Context`] of the run, its private [`kv`] store, [`nats::publish`] and outbound
//! [`http`]. All but logging and config need a grant in the job spec (`allow_kv`,
//! `allow_publish`, `allow_http`); without it a call returns an error string, it never
//! traps. There is no filesystem, environment or socket access.

#![deny(missing_docs)]

mod context;
mod export;

pub mod config;
pub mod http;
pub mod kv;
pub mod log;
pub mod nats;
pub mod time;

pub use context::{Context, Trigger};
pub use export::IntoOutput;

/// Marks the function that runs the job; see the crate docs for a full example.
///
/// Goes on a function `fn NAME(ctx: &Context) -> Result<T, E>` where `T` is `()`,
/// `String` or `Option<String>` (see [`IntoOutput`]) and `E` implements `Display`.
/// Use it once per crate.
///
/// Keys (`schedule` is required unless `on` or `after` is given; unknown keys are a
/// compile error):
///
/// | key | example | meaning (as in the job spec) |
/// |---|---|---|
/// | `schedule` | `"0 */5 * * * *"`, `"@every 90s"` | cron expression (5, 6 or 7 fields) or `@` form |
/// | `timezone` | `"Europe/Berlin"` | IANA zone the schedule is read in |
/// | `timeout` | `"30s"` | deadline of one run |
/// | `overlap` | `"skip"` | `skip`, `allow`, `queue` or `replace` |
/// | `lock` | `true`, `"backups"` | run under a lock named after the job, or a shared one |
/// | `catchup` | `"latest"` | `none`, `latest` or `all` |
/// | `catchup_window` | `"1h"` | how far back catch-up looks |
/// | `starting_deadline` | `"60s"` | a fire found later than this is `missed` |
/// | `retries` | `3` | attempts after a failure |
/// | `backoff` | `"10s"` | delay between attempts (needs `retries`) |
/// | `jitter` | `"5s"` | random delay in `[0, jitter)` |
/// | `pool` | `"default"` | which runners may take the job |
/// | `description` | `"..."` | free text |
/// | `on` | `"orders.*"`, `on(subject = "orders.*", redeliver = 5)` (`concurrency = 4` needs `overlap = "allow"`) | a run per message on the subject, the message as `ctx.input()` |
/// | `after` | `"extract"`, `after(job = "extract", on = "failed")` | a run per run of that job ending so (`succeeded` by default); repeat for more upstreams |
///
/// Durations are written like `500ms`, `30s`, `5m`, `1h30m`. Values are checked at
/// compile time by the validation `cronrun deploy` runs (the `cronrun-model` crate), so a
/// bad schedule, zone, duration or name is a compile error with deploy's message; what
/// depends on the deployment (cycles of `after`, a subject reaching cronrun's own) is
/// checked at deploy. The
/// embedded JSON holds exactly the keys given (`backoff` goes into `retries.backoff`,
/// `on = "S"` is `on: {subject: "S"}`, each `after` one entry of `after: [...]`); the host
/// applies its defaults to the rest. `cronrun deploy` takes `on` and `after` from the
/// component when it carries them, and otherwise keeps those the stored job has.
pub use cronrun_sdk_macros::job;

/// Re-export of the `wasip2` crate (WASI 0.2.12 bindings) for WASI APIs beyond
/// [`http`], e.g. `wasi::random` or `wasi::clocks`.
pub use wasip2 as wasi;

/// Used by the code `#[job]` generates; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::export::call;

    /// The wit-bindgen bindings of the `cronrun:job/job` world.
    #[allow(missing_docs, unsafe_code, clippy::all)]
    pub mod bindings {
        wit_bindgen::generate!({
            path: "wit",
            world: "cronrun:job/job",
            pub_export_macro: true,
            export_macro_name: "__cronrun_export_job",
        });
    }

    pub use bindings::__cronrun_export_job as export;
    pub use bindings::Guest;
    pub use bindings::cronrun::job::types::JobContext;
}

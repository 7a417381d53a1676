//! Integration tests: a real nats-server (with authentication) per test, cronrun agents and
//! the CLI as real processes of the built binary. One test binary, so that the shared
//! support and the runtime (wasmtime among it) are compiled and linked once; select a
//! file's tests by its module, e.g. `cargo test -p cronrun --test integration wasm::`.
//! The chaos suite is a binary of its own (`--test chaos`): it kills servers and agents
//! and is best read alone.
//!
//! - `scheduling`: exactly once per fire across agents and failover; live edits.
//! - `hashed`: `H` in schedules: `next --job`, `ls` and the scheduler agree on a job's
//!   slots; bad `H` refused in one line.
//! - `sharding`: shards spread over schedulers joining, stopping and dying.
//! - `catchup`: fires missed while no scheduler ran.
//! - `backfill`: `cronrun backfill`: each past fire once, repeated or interrupted.
//! - `calendars`: a job's `exclude`: next, backfill and the scheduler agree; changes count
//!   from the next fire; bad calendars refused.
//! - `cost`: what a run stores in NATS with the defaults, and what its readers see of it.
//! - `overlap`: overlap policies and locks shared across agents.
//! - `runner`: the shell runner: kill, timeouts, bounded output, live logs.
//! - `supervisor`: a shell run's first process, alone: its stop signal, how it starts a
//!   command, one from another build.
//! - `failure`: retries, lost runs, hand-over on SIGTERM.
//! - `jobs_hostile`: a hostile job author and job processes: loader variables, privileged
//!   groups, escapers that fork and `setsid`.
//! - `input`: bad input refused with one line and nothing written.
//! - `parameters`: `trigger --input`, checked, kept in the record, read by the job.
//! - `wasm`: `cronrun deploy` and the Wasm host called directly.
//! - `wasm_agent`: deployed Wasm jobs run by a real agent.
//! - `security`: each role refused what it must not do; bad credentials.
//! - `hostile`: the routes around an allow-list (reply subjects, deliver subjects, durables).
//! - `secrets`: `cronrun secret`, secrets in env, config and webhooks, masked output, and
//!   every route to the secrets bucket tried by the identities that must not take it.
//! - `accounts`: deployments in NATS accounts of their own; identities as `.creds` JWTs.
//! - `deploy`: the nats-server configs in deploy/ are ones nats-server takes.
//! - `observe`: the agent's /livez, /readyz and /metrics.
//! - `traces`: `[telemetry]`: a trace per run, sent to a real OTLP/HTTP receiver.
//! - `storage`: the layout sized within the storage JetStream gives; streams' use and limits.
//! - `dashboard`: the web dashboard in a real headless Chromium.
//! - `topology`: runners on a leaf node of the hub (its link cut and restored); two regions
//!   joined by a gateway; the servers started from the configs of `deploy/`.
//! - `up`: `cronrun up` as a user runs it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

#[path = "../support/mod.rs"]
mod support;

#[path = "../procs.rs"]
mod procs;

mod accounts;
mod backfill;
mod calendars;
mod catchup;
mod chains;
mod cost;
mod dashboard;
mod deploy;
mod dst;
mod failure;
mod gitops;
mod hashed;
mod hostile;
mod import;
mod input;
mod jobs_hostile;
mod messages;
mod notify;
mod observe;
mod operate;
mod overlap;
mod parameters;
mod runner;
mod scaffold;
mod scheduling;
mod secrets;
mod security;
mod sharding;
mod storage;
mod supervisor;
mod topology;
mod traces;
mod up;
mod wasm;
mod wasm_agent;

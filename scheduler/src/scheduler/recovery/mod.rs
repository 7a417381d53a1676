//! Recovery: runs whose runner died, retries that are due, and runs left without an owner
//! or a trace. Runners never dispatch, so these are settled by a scheduler.
//!
//! - `reaper.rs`: follows run leases (on the leader of shard 0) and acts on their expiry.
//! - `expiry.rs`: what an expired run lease means (lost, retry due).
//! - `sweep.rs`: every `reconcile_every`, runs left without an owner or a trace settled.

mod expiry;
pub(super) mod reaper;
pub mod sweep;

//! Firing: a shard's lease, and what its holder does with it: keep the shard's next fires
//! and turn those due into dispatched runs, on time, late or recorded missed.
//!
//! - `shard.rs`: one shard: stand by for its lease, lead while holding it.
//! - `shard_lease.rs`: what standing by and leading need of a lease (traits).
//! - `leader.rs`: what leading a shard sets up, and its ports to NATS.
//! - `leading.rs`: the loop of leading, over its ports (a trait).
//! - `keeping.rs`: the leader's renewals of its lease and moves of its watermark.
//! - `plan.rs`: the leader's decisions: which fires to dispatch or record missed, and when.
//! - `queue.rs`: next fires of every job of a shard (heap).
//! - `in_flight.rs`: dispatches in flight, a job's fires dispatched in fire order.
//! - `catchup.rs`: late fires: run, catch up or record as missed.
//! - Tests only: `fake_leases.rs`, an in-memory lease table; `lease_tests.rs`, the lease
//!   keeping and the takeover driven with it on tokio's paused clock; `lead_tests.rs`,
//!   the loop of leading driven the same way, with ports of its own.

mod catchup;
#[cfg(test)]
mod fake_leases;
mod in_flight;
mod keeping;
#[cfg(test)]
mod lead_tests;
pub(super) mod leader;
mod leading;
#[cfg(test)]
mod lease_tests;
mod plan;
pub(super) mod queue;
pub(super) mod shard;
mod shard_lease;

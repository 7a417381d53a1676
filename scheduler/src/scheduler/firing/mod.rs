//! Firing: a shard's lease, and what its holder does with it: keep the shard's next fires
//! and turn those due into dispatched runs, on time, late or recorded missed.
//!
//! - `shard.rs`: one shard: stand by for its lease, lead while holding it.
//! - `leader.rs`: the work done while holding a shard lease.
//! - `plan.rs`: the leader's decisions: which fires to dispatch or record missed, and when.
//! - `queue.rs`: next fires of every job of a shard (heap).
//! - `in_flight.rs`: dispatches in flight, a job's fires dispatched in fire order.
//! - `catchup.rs`: late fires: run, catch up or record as missed.

mod catchup;
mod in_flight;
pub(super) mod leader;
mod plan;
pub(super) mod queue;
pub(super) mod shard;

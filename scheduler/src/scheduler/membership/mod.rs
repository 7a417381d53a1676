//! Membership: who the schedulers are, when a change of them is acted on, and which of
//! them owns which shard. Every scheduler computes the same owners from the same list, so
//! that no shard is led by two of them for long, nor by none.
//!
//! - `members.rs`: scheduler presence, so all agree on the member list.
//! - `settle.rs`: when a change of the member list is acted on.
//! - `shards.rs`: a job's shard, the shard count, who owns which shard.

pub(super) mod members;
pub(super) mod settle;
pub(super) mod shards;

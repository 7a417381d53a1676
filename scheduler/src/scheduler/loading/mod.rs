//! Loading: the jobs of the shards a scheduler takes, read in one pass over the schedules
//! index or from the shards' snapshots, then followed by each shard's leader. Taking a
//! shard is what costs the server most, so reading is batched and snapshotted here.
//!
//! - `loader.rs`: the jobs of the shards taken, many shards in one pass.
//! - `snapshot.rs`: the shards' snapshots of the index, read instead of a pass.
//! - `index.rs`: a led shard's job changes, and its triggers published.
//! - `refresh.rs`: a led shard's snapshot kept current by its leader.

pub(super) mod index;
pub mod loader;
pub(super) mod refresh;
pub mod snapshot;

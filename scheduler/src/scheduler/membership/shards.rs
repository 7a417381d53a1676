//! Which shard a job is in, how many shards there are, and which scheduler owns which.
//!
//! A job's shard is a stable hash of its name modulo the shard count: 32-bit FNV-1a, which
//! is what NATS's subject-mapping `partition` computes, so that the server files each job
//! under the same shard in the schedules index (see `loading::index`). The count is fixed
//! when a deployment first starts: the first scheduler stores it under `shards` in the
//! leases bucket and every later one uses it, since changing it would move jobs to shards
//! whose watermarks never saw them.
//!
//! Owners are chosen by rendezvous hashing with bounded load: every scheduler computes the
//! same assignment from the same member list, each member gets at most ⌈shards/members⌉
//! shards, and a member joining or leaving moves few shards besides its own.

use crate::error::{Error, ErrorKind};
use crate::store::Store;

/// Shards of a new deployment unless `[scheduler] shards` says otherwise.
pub const DEFAULT_SHARDS: u32 = 64;
/// The key in the leases bucket holding the shard count.
pub const SHARDS_KEY: &str = crate::names::lease_keys::SHARD_COUNT;

/// FNV-1a over the concatenated parts: fixed by its definition, the same on every host,
/// Rust release and cronrun version (unlike `std`'s `DefaultHasher`).
pub(in crate::scheduler) fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The shard of job `name` among `count`: NATS's `{{partition(count,1)}}` of the job's
/// key, 32-bit FNV-1a of the name modulo the count.
pub fn shard_of(name: &str, count: u32) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h % count.max(1)
}

/// The owner of every shard (index into `members`, which must be sorted and deduplicated
/// so that all schedulers agree). Empty when there are no members.
pub fn assign(members: &[String], count: u32) -> Vec<usize> {
    if members.is_empty() {
        return Vec::new();
    }
    // Loads differ by at most one: the members ranking highest by their own hash take
    // the remainder. The caps sum to `count`, so every shard finds a member below its cap.
    let (floor, extra) = (count as usize / members.len(), count as usize % members.len());
    let mut by_rank: Vec<usize> = (0..members.len()).collect();
    by_rank.sort_by_key(|&i| std::cmp::Reverse(mix(fnv1a(&[members[i].as_bytes()]))));
    let mut cap = vec![floor; members.len()];
    by_rank.iter().take(extra).for_each(|&i| cap[i] += 1);
    let mut load = vec![0usize; members.len()];
    let mut ranked: Vec<(u64, usize)> = Vec::with_capacity(members.len());
    (0..count)
        .map(|shard| {
            ranked.clear();
            let shard_bytes = shard.to_le_bytes();
            ranked.extend(members.iter().enumerate().map(|(i, m)| (mix(fnv1a(&[m.as_bytes(), &shard_bytes])), i)));
            ranked.sort_unstable_by(|a, b| b.cmp(a));
            let owner = ranked.iter().map(|&(_, i)| i).find(|&i| load[i] < cap[i]).unwrap_or(ranked[0].1);
            load[owner] += 1;
            owner
        })
        .collect()
}

/// Spreads FNV's weak low bits over the whole word (splitmix64's finaliser).
pub(in crate::scheduler) fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The deployment's shard count: the stored one, or `configured` (default 64) stored by
/// the first scheduler. A configured count that differs from the stored one is refused.
pub async fn shard_count(store: &Store, configured: Option<u32>) -> Result<u32, Error> {
    let wanted = configured.unwrap_or(DEFAULT_SHARDS);
    let stored = match store.leases.create(SHARDS_KEY, wanted.to_string().into_bytes().into(), None).await {
        Ok(_) => return Ok(wanted),
        // Read from the leader: on a fresh cluster, agents starting together find the key
        // created by another while their replica has not stored it yet.
        Err(e) if *e.kind() == ErrorKind::AlreadyExists => store.leases.get_from_leader(SHARDS_KEY).await?,
        Err(e) => return Err(e),
    };
    let text = stored.map(|v| String::from_utf8_lossy(&v.value).into_owned()).unwrap_or_default();
    let count = parse_count(&text).ok_or_else(|| {
        Error::invalid(
            "scheduler.shards",
            format!("key {SHARDS_KEY:?} in the leases bucket holds {text:?}, not a shard count: put the deployment's count back (`nats kv put <ns>_leases shards 64`)"),
        )
    })?;
    match configured {
        Some(c) if c != count => Err(Error::invalid(
            "scheduler.shards",
            format!(
                "scheduler.shards is {c} but this deployment was started with {count} shards, which cannot change: remove the setting or set it to {count}"
            ),
        )),
        _ => Ok(count),
    }
}

/// The count stored under `SHARDS_KEY`, if it is one.
pub fn parse_count(stored: &str) -> Option<u32> {
    stored.trim().parse().ok().filter(|n| (1..=MAX_SHARDS).contains(n))
}

/// The most shards a deployment may have.
pub const MAX_SHARDS: u32 = 4096;

/// `shards` as sorted ranges, e.g. `0-3, 7, 9-12`; `none` when empty.
pub fn ranges(shards: impl IntoIterator<Item = u32>) -> String {
    let mut sorted: Vec<u32> = shards.into_iter().collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        while i + 1 < sorted.len() && sorted[i + 1] == sorted[i] + 1 {
            i += 1;
        }
        out.push(if sorted[i] == start { start.to_string() } else { format!("{start}-{}", sorted[i]) });
        i += 1;
    }
    if out.is_empty() { "none".into() } else { out.join(", ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> Vec<String> {
        let mut m: Vec<String> = (0..n).map(|i| format!("host-{i}/{:08x}", i * 7919)).collect();
        m.sort();
        m
    }

    fn loads(owners: &[usize], n: usize) -> Vec<usize> {
        let mut load = vec![0; n];
        owners.iter().for_each(|&o| load[o] += 1);
        load
    }

    /// Pinned: the shards nats-server 2.14's `{{partition(64,1)}}` filed these keys under
    /// (read back from a sourced stream). A scheduler that disagreed would lead jobs it
    /// never loads.
    #[test]
    fn a_jobs_shard_is_the_one_nats_partition_gives_it() {
        for (name, shard) in [("alpha", 43), ("beta", 7), ("bulk-00", 32), ("x", 7)] {
            assert_eq!(shard_of(name, 64), shard, "{name}");
        }
        assert_eq!(shard_of("anything", 1), 0);
        assert_eq!(shard_of("anything", 0), 0);
        assert!((0..1000).all(|i| shard_of(&format!("job-{i}"), 64) < 64));
    }

    #[test]
    fn shards_spread_evenly() {
        for n in 1..=12 {
            let owners = assign(&members(n), 64);
            assert_eq!(owners.len(), 64);
            let load = loads(&owners, n);
            let (min, max) = (load.iter().min().unwrap(), load.iter().max().unwrap());
            assert!(max - min <= 1, "{n} members: {load:?}");
        }
    }

    #[test]
    fn a_joining_member_moves_few_shards() {
        let before = members(4);
        let mut after = before.clone();
        after.push("host-new/00000001".into());
        after.sort();
        let (old, new) = (assign(&before, 64), assign(&after, 64));
        let moved = (0..64).filter(|&s| before[old[s]] != after[new[s]]).count();
        // The newcomer takes about 64/5 shards; a few more move to keep loads bounded.
        assert!(moved <= 24, "{moved} shards moved");
        let taken = new.iter().filter(|&&o| after[o] == "host-new/00000001").count();
        assert!((12..=13).contains(&taken), "newcomer owns {taken}");
    }

    #[test]
    fn the_hash_of_owners_and_jitter_is_stable() {
        // Fixed: a change here would move shards between schedulers of different versions.
        assert_eq!(fnv1a(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn shard_sets_read_as_ranges() {
        for (shards, text) in [
            (vec![], "none"),
            (vec![5], "5"),
            (vec![3, 0, 1, 2], "0-3"),
            (vec![0, 1, 2, 3, 7, 9, 10, 11, 12], "0-3, 7, 9-12"),
            (vec![4, 4, 5], "4-5"),
        ] {
            assert_eq!(ranges(shards), text);
        }
    }
}

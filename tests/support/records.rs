//! What tests judge by: run records and events as stored, shard holders, and the files
//! jobs write to record their own executions (exactly-once is judged from those).

use std::path::Path;
use std::time::{Duration, Instant};

use cronrun::record::RunRecord;
use cronrun::store::Store;

use super::TEST_SHARDS;

/// The job's run records; retried while NATS elects a leader (chaos tests).
pub async fn runs(store: &Store, job: &str) -> Vec<RunRecord> {
    let mut tries = 0;
    loop {
        match store.list_runs(job).await {
            Ok(runs) => return runs.into_iter().map(|r| r.record).collect(),
            Err(e) if tries < 50 => {
                tries += 1;
                eprintln!("listing runs of {job}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("listing runs of {job}: {e}"),
        }
    }
}

/// The record of run `key` (`JOB.RUN_ID`) once it has a final status (a run that is
/// retried is final only when its last attempt ended).
pub async fn final_record(store: &Store, key: &str) -> RunRecord {
    let (job, run) = cronrun::record::parse_run_key(key).unwrap();
    super::eventually(Duration::from_secs(30), &format!("run {key} to end"), || async {
        store.get_run(job, run).await.ok().map(|s| s.record).filter(|r| r.status.is_final())
    })
    .await
}

/// Waits until the leaders of `downstream`'s shards have published their `after` and the
/// agents follow chains (the shared `chains` consumer of the runs bucket exists): a chain
/// applies only to the runs that end after both.
pub async fn following_chains(store: &Store, downstream: &[&str]) {
    super::eventually(Duration::from_secs(15), "the leaders to publish the chains", || async {
        for job in downstream {
            let key = format!("triggers.{}", cronrun::scheduler::shard_of(job, TEST_SHARDS));
            let published = store.leases.get(&key).await.ok()??;
            let triggers: serde_json::Value = serde_json::from_slice(&published.value).ok()?;
            triggers[job]["after"].as_array()?;
        }
        Some(())
    })
    .await;
    let runs_stream = store.js.get_stream("KV_cronrun_runs").await.unwrap();
    super::eventually(Duration::from_secs(15), "the agents to follow chains", || async {
        runs_stream.consumer_info("chains").await.ok().map(drop)
    })
    .await;
}

/// Waits until nothing more of `jobs` can run, so that what ran is counted over a span
/// known complete rather than within a fixed while: every record of theirs final, no
/// message waiting for a job, no run record's write waiting for the chains consumer, and
/// no run queued or running (the dispatch stream, a work queue whose messages runners ack
/// at a run's end, empty), with nothing dispatched while all that was looked at.
pub async fn nothing_left_to_run(store: &Store, jobs: &[&str]) {
    super::eventually(Duration::from_secs(60), "nothing left to run", || async {
        let before = idle_dispatch(store).await?;
        for job in jobs {
            if !runs(store, job).await.iter().all(|r| r.status.is_final()) {
                return None;
            }
        }
        stream_empty(store, &store.names.messages_stream()).await?;
        consumer_idle(store, &runs_stream(store), cronrun::model::roles::CHAIN_CONSUMER).await?;
        (idle_dispatch(store).await? == before).then_some(())
    })
    .await
}

/// Waits until no notice can come any more of the events published so far: the shared
/// `notify` consumer has handed out and had acked every one (a retry or a redelivery is
/// an event pending or unacked until then).
pub async fn notices_settled(store: &Store) {
    let events = store.names.events_stream();
    super::eventually(Duration::from_secs(60), "the notify consumer to settle", || async {
        consumer_idle(store, &events, cronrun::model::roles::NOTIFY_CONSUMER).await
    })
    .await
}

/// The last sequence of the dispatch stream, if it holds no message: no run queued or
/// running.
async fn idle_dispatch(store: &Store) -> Option<u64> {
    let mut stream = store.js.get_stream(store.names.dispatch_stream()).await.ok()?;
    let state = stream.info().await.ok()?.state.clone();
    (state.messages == 0).then_some(state.last_sequence)
}

/// Some if stream `name` holds no message, or does not exist.
async fn stream_empty(store: &Store, name: &str) -> Option<()> {
    use async_nats::jetstream::{ErrorCode, context::GetStreamErrorKind};
    match store.js.get_stream(name).await {
        Ok(mut stream) => (stream.info().await.ok()?.state.messages == 0).then_some(()),
        Err(e) if matches!(e.kind(), GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND) => {
            Some(())
        }
        Err(_) => None,
    }
}

/// Some if `consumer` of `stream` has nothing left to hand out and nothing unacked, or
/// does not exist.
async fn consumer_idle(store: &Store, stream: &str, consumer: &str) -> Option<()> {
    use async_nats::jetstream::context::ConsumerInfoErrorKind;
    let stream = store.js.get_stream(stream).await.ok()?;
    match stream.consumer_info(consumer).await {
        Ok(info) => (info.num_pending == 0 && info.num_ack_pending == 0).then_some(()),
        Err(e) if e.kind() == ConsumerInfoErrorKind::NotFound => Some(()),
        Err(_) => None,
    }
}

fn runs_stream(store: &Store) -> String {
    format!("KV_{}", store.names.runs_bucket())
}

/// Every event `kind` of `job` published so far, as JSON.
pub async fn events(store: &Store, job: &str, kind: &str) -> Vec<serde_json::Value> {
    use async_nats::jetstream::consumer::{DeliverPolicy, push};
    use futures::StreamExt;
    // Retried while NATS elects a leader (chaos tests).
    let mut tries = 0;
    let consumer = loop {
        let created = async {
            let stream = store.js.get_stream(store.names.events_stream()).await.map_err(|e| e.to_string())?;
            stream
                .create_consumer(push::OrderedConfig {
                    deliver_subject: store.client.new_inbox(),
                    filter_subject: store.names.event_subject(job, kind),
                    deliver_policy: DeliverPolicy::All,
                    ..Default::default()
                })
                .await
                .map_err(|e| e.to_string())
        };
        match created.await {
            Ok(c) => break c,
            Err(e) if tries < 50 => {
                tries += 1;
                eprintln!("reading events of {job}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("reading events of {job}: {e}"),
        }
    };
    let mut out = Vec::new();
    if consumer.cached_info().num_pending == 0 {
        return out;
    }
    let mut messages = consumer.messages().await.unwrap();
    while let Some(Ok(m)) = messages.next().await {
        out.push(serde_json::from_slice(&m.payload).unwrap());
        if m.info().unwrap().pending == 0 {
            break;
        }
    }
    out
}

/// The lease key of the shard `job` is in.
pub fn shard_key(job: &str) -> String {
    format!("shard.{}", cronrun::scheduler::shard_of(job, TEST_SHARDS))
}

/// The agent name holding each shard lease now (unheld shards are absent).
pub async fn shard_holders(store: &Store) -> std::collections::BTreeMap<u32, String> {
    let mut holders = std::collections::BTreeMap::new();
    for n in 0..TEST_SHARDS {
        let key = format!("shard.{n}");
        if let Ok(Some(lease)) = cronrun::store::lease::holder(&store.leases, &key).await {
            let agent = lease.holder.split('/').next().unwrap_or_default().to_string();
            holders.insert(n, agent);
        }
    }
    holders
}

/// How many shards each agent holds, once all are held.
pub async fn shard_counts(store: &Store) -> Option<std::collections::BTreeMap<String, usize>> {
    let holders = shard_holders(store).await;
    let mut counts = std::collections::BTreeMap::new();
    for agent in holders.values() {
        *counts.entry(agent.clone()).or_default() += 1;
    }
    (holders.len() == TEST_SHARDS as usize).then_some(counts)
}

/// A `[[job]]` firing every second that records its own executions: it appends its fire
/// instant to `<dir>/<name>.fires`. Exactly-once is judged from these files. The job has
/// the defaults users get (`overlap = "skip"`): a fire delayed behind another must still run.
pub fn recording_job(name: &str, dir: &Path) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"* * * * * *\"\n\
         shell = 'echo $CRONRUN_SCHEDULED_AT >> {}/{name}.fires'\n",
        dir.display()
    )
}

/// The seconds of `[from, from + secs)` at which job `name` (see `recording_job`) did not
/// run exactly once, with how often it ran then.
pub fn seconds_not_run_once(
    name: &str,
    dir: &Path,
    from: chrono::DateTime<chrono::Utc>,
    secs: i64,
) -> Vec<(chrono::DateTime<chrono::Utc>, usize)> {
    let text = std::fs::read_to_string(dir.join(format!("{name}.fires"))).unwrap_or_default();
    let fires: Vec<chrono::DateTime<chrono::Utc>> =
        text.lines().filter_map(|l| chrono::DateTime::parse_from_rfc3339(l).ok()).map(|t| t.to_utc()).collect();
    (0..secs)
        .map(|s| from + chrono::Duration::seconds(s))
        .map(|at| (at, fires.iter().filter(|f| **f == at).count()))
        .filter(|(_, n)| *n != 1)
        .collect()
}

/// Waits (within a bound) until the window is settled (see `fires_not_run_once`), then
/// asserts each job of `names` ran exactly once per second, judged by what they recorded.
pub async fn assert_jobs_ran_each_second_once(
    names: &[String],
    dir: &Path,
    from: chrono::DateTime<chrono::Utc>,
    secs: i64,
) {
    let wrong = fires_not_run_once(names, dir, from, secs).await;
    assert!(wrong.is_empty(), "(job, fire, times it ran): {wrong:#?}");
    println!("{} jobs x {secs} fires from {from} each ran exactly once, as the jobs recorded", names.len());
}

/// The fires of `[from, from + secs)` at which the jobs of `names` (see `recording_job`)
/// did not run exactly once, as (job, fire, times it ran), once the window is settled:
/// every fire of it ran and each job recorded a later fire (its runs do not overlap, so
/// a later fire recorded means the window's own are behind it). Judged after a bounded
/// while from the window's end all the same: the fires of a gap are dispatched late.
pub async fn fires_not_run_once(
    names: &[String],
    dir: &Path,
    from: chrono::DateTime<chrono::Utc>,
    secs: i64,
) -> Vec<(String, chrono::DateTime<chrono::Utc>, usize)> {
    let to = from + chrono::Duration::seconds(secs);
    let wrong = || -> Vec<(String, chrono::DateTime<chrono::Utc>, usize)> {
        names
            .iter()
            .flat_map(|name| {
                seconds_not_run_once(name, dir, from, secs).into_iter().map(|(at, n)| (name.clone(), at, n))
            })
            .collect()
    };
    let settled = || {
        !wrong().iter().any(|(_, _, n)| *n == 0)
            && names.iter().all(|name| last_fire(name, dir).is_some_and(|f| f >= to))
    };
    let deadline = after_window(to, Duration::from_secs(30));
    while !settled() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wrong()
}

/// The latest fire job `name` (see `recording_job`) recorded in `dir`.
pub fn last_fire(name: &str, dir: &Path) -> Option<chrono::DateTime<chrono::Utc>> {
    let text = std::fs::read_to_string(dir.join(format!("{name}.fires"))).ok()?;
    text.lines().filter_map(|l| chrono::DateTime::parse_from_rfc3339(l).ok()).map(|t| t.to_utc()).max()
}

/// The instant `bound` after the window ending at `to` has passed (or after now, if it
/// has): how long a window's late fires are waited for, however far ahead it ends.
fn after_window(to: chrono::DateTime<chrono::Utc>, bound: Duration) -> Instant {
    let ahead = (to - chrono::Utc::now()).to_std().unwrap_or_default();
    Instant::now() + ahead + bound
}

/// Asserts that every second of `[from, from + secs)` has exactly one scheduled run of
/// `job` that succeeded and was started exactly once. Returns the runs checked.
pub async fn assert_each_second_once(store: &Store, job: &str, from: chrono::DateTime<chrono::Utc>, secs: i64) {
    use cronrun::record::{Status, Trigger};
    let to = from + chrono::Duration::seconds(secs);
    // Wait until the window is settled: complete, every run of it final, and the run of
    // a later fire final too (schedulers fire in order: a fire of the window dispatched
    // twice is dispatched before it). Then judge what is there, also past the bound.
    let deadline = after_window(to, Duration::from_secs(30));
    let runs = loop {
        let all = runs(store, job).await;
        let later_final = all.iter().any(|r| r.scheduled_at.is_some_and(|t| t >= to) && r.status.is_final());
        let runs: Vec<_> = all.into_iter().filter(|r| r.scheduled_at.is_some_and(|t| t >= from && t < to)).collect();
        let complete = runs.len() as i64 >= secs && runs.iter().all(|r| r.status.is_final());
        if (complete && later_final) || Instant::now() > deadline {
            break runs;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let started = events(store, job, "started").await;
    let mut missing = Vec::new();
    for s in 0..secs {
        let at = from + chrono::Duration::seconds(s);
        let here: Vec<_> = runs.iter().filter(|r| r.scheduled_at == Some(at)).collect();
        if here.len() != 1 {
            missing.push(format!("{at}: {} runs", here.len()));
            continue;
        }
        let r = here[0];
        if r.status != Status::Succeeded {
            missing.push(format!("{at}: {} {:?} host {:?}", r.status.as_str(), r.error, r.host));
            continue;
        }
        assert_eq!(r.trigger, Trigger::Schedule);
        // One record per fire, first attempt; events are best effort (one may be lost in
        // a leader election) but a second start would show.
        assert_eq!(r.attempt, 1, "run {} needed attempt {}", r.run_id, r.attempt);
        let starts = started.iter().filter(|e| e["run_id"] == r.run_id.as_str()).count();
        assert!(starts <= 1, "run {} started {starts} times", r.run_id);
    }
    assert!(missing.is_empty(), "seconds without exactly one run: {missing:?}");
    println!("{job}: {secs} fires in [{from}, {to}) each ran exactly once");
}

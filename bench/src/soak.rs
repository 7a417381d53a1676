//! `bench soak`: many runs through restarts, for as long as asked. Every-second shell jobs
//! that record their own executions run on a deployment of separate agent processes; in
//! turn one agent is restarted (SIGTERM) and nats-server is killed (SIGKILL) and started
//! again on its store. Agent `a0` is never restarted: it is the one whose memory and file
//! descriptors are judged. Afterwards: what each job did (once per fire, never twice),
//! and whether what NATS holds and what `a0` holds stayed flat after the first round of
//! restarts.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;

use super::deployment::Deployment;
use cronrun::cli::Ctx;
use cronrun::store::Store;

const NAMESPACE: &str = "benchsoak";
/// After a restart, the time the deployment has to settle before it is sampled.
const SETTLE: Duration = Duration::from_secs(10);

pub(super) struct SoakArgs {
    pub jobs: usize,
    pub minutes: u64,
    pub agents: usize,
    pub restart_every: Duration,
}

/// What a sample follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Event {
    AgentRestart,
    ServerCrash,
    End,
}

/// What is measured at one moment, `SETTLE` after an event.
#[derive(Debug, Clone, Copy, Serialize)]
struct Sample {
    after: Event,
    at_s: u64,
    #[serde(skip)]
    wall: DateTime<Utc>,
    leases: u64,
    runs: u64,
    dispatch: u64,
    events: u64,
    a0_rss_kib: u64,
    a0_fds: usize,
    server_rss_kib: u64,
}

pub(super) async fn run(ctx: &Ctx, a: SoakArgs) -> Result<()> {
    let length = Duration::from_secs(a.minutes * 60);
    if a.agents < 2 {
        bail!("bench soak needs --agents 2 or more: one is restarted while a0 runs on");
    }
    if a.restart_every <= SETTLE {
        bail!("bench soak: --restart-every must be over {} s, the time a restart is given to settle", SETTLE.as_secs());
    }
    // Agent restart, crash, agent restart, crash, agent restart at least: a baseline after
    // the first crash, and a settled sample after the second.
    let rounds = (length.saturating_sub(SETTLE).as_secs() / a.restart_every.as_secs()) as usize;
    if rounds < 5 {
        bail!(
            "bench soak: --minutes {} leaves room for {rounds} restarts every {} s: give it 5 at least",
            a.minutes,
            a.restart_every.as_secs()
        );
    }
    let mut deployment = Deployment::start(NAMESPACE, (a.agents, 1), "").await?;
    let fires = deployment.path().join("fires");
    std::fs::create_dir_all(&fires).context("creating the fires directory")?;
    let names: Vec<String> = (0..a.jobs).map(|i| format!("soak-{i:04}")).collect();
    deployment.apply(&jobs_toml(&names, &fires)).await?;
    let store = deployment.store().await?;
    eprintln!(
        "{} every-second jobs on {} agents for {} min: {rounds} restarts, one every {} s",
        a.jobs,
        a.agents,
        a.minutes,
        a.restart_every.as_secs()
    );

    let started = Instant::now();
    let mut samples = Vec::new();
    let mut outages = Vec::new();
    for round in 0..rounds {
        // On a clock of its own: the restarts' time does not stretch the soak.
        tokio::time::sleep_until((started + a.restart_every * (round as u32 + 1) - SETTLE).into()).await;
        let after = if round % 2 == 0 {
            deployment.restart_agent(1 + (round / 2) % (a.agents - 1)).await?;
            Event::AgentRestart
        } else {
            let down = Utc::now();
            deployment.crash_and_restart_server().await?;
            outages.push((down, Utc::now()));
            Event::ServerCrash
        };
        tokio::time::sleep(SETTLE).await;
        let sample = sample(&store, &mut deployment, started, after).await?;
        eprintln!("{sample:?}");
        samples.push(sample);
    }
    tokio::time::sleep_until((started + length).into()).await;
    let to = Utc::now() - chrono::Duration::seconds(2);
    samples.push(sample(&store, &mut deployment, started, Event::End).await?);
    // Judged from the first sample after a server crash was survived on: warm-up behind.
    let baseline = samples[2];
    let from = DateTime::from_timestamp(baseline.wall.timestamp() + 1, 0).unwrap_or(baseline.wall);
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(store);
    deployment.stop_agents().await?;
    let fired = judge_fires(&names, &fires, from, to, &outages)?;
    deployment.stop().await?;

    let grew = judge_flat(&samples, a.jobs);
    let last = samples[samples.len() - 1];
    let value = json!({
        "jobs": a.jobs, "agents": a.agents, "minutes": a.minutes, "restarts": rounds,
        "fires": fired, "samples": samples, "grew": grew,
    });
    ctx.print(&value, || {
        format!(
            "soak: {} jobs x {} s judged ({} fires) through {rounds} restarts: {} ran once, {} twice, \
             {} not run ({} of them while nats-server was down)\n\
             from the baseline to the end: leases {} -> {}, runs {} -> {}, dispatch {} -> {}, events {} -> {} \
             messages; a0 RSS {:.1} -> {:.1} MiB, fds {} -> {}; nats-server RSS {:.1} -> {:.1} MiB{}",
            a.jobs,
            fired.seconds,
            fired.expected,
            fired.once,
            fired.twice,
            fired.not_run,
            fired.not_run_in_outage,
            baseline.leases,
            last.leases,
            baseline.runs,
            last.runs,
            baseline.dispatch,
            last.dispatch,
            baseline.events,
            last.events,
            baseline.a0_rss_kib as f64 / 1024.0,
            last.a0_rss_kib as f64 / 1024.0,
            baseline.a0_fds,
            last.a0_fds,
            baseline.server_rss_kib as f64 / 1024.0,
            last.server_rss_kib as f64 / 1024.0,
            if grew.is_empty() { String::new() } else { format!("\ngrew: {}", grew.join("; ")) },
        )
    })?;
    if fired.twice > 0 || fired.not_run > fired.not_run_in_outage {
        bail!(
            "{} fires ran twice, {} did not run outside an outage",
            fired.twice,
            fired.not_run - fired.not_run_in_outage
        );
    }
    if !grew.is_empty() {
        bail!("state grew with the runs: {}", grew.join("; "));
    }
    Ok(())
}

/// Every-second jobs that append their fire instant to a file of their own.
pub(super) fn jobs_toml(names: &[String], fires: &Path) -> String {
    names
        .iter()
        .map(|name| {
            format!(
                "[[job]]\nname = \"{name}\"\nschedule = \"* * * * * *\"\noverlap = \"allow\"\n\
                 history = {{ succeeded = 3, failed = 3 }}\nshell = 'echo $CRONRUN_SCHEDULED_AT >> {}/{name}'\n",
                fires.display()
            )
        })
        .collect()
}

/// A sample; an error when a0 has exited (it is never restarted).
async fn sample(store: &Store, deployment: &mut Deployment, started: Instant, after: Event) -> Result<Sample> {
    let names = &store.names;
    let server_rss_kib = deployment.server_rss_kib();
    let a0 = &mut deployment.agents[0];
    Ok(Sample {
        after,
        at_s: started.elapsed().as_secs(),
        wall: Utc::now(),
        leases: messages(store, &format!("KV_{}", names.leases_bucket())).await?,
        runs: messages(store, &format!("KV_{}", names.runs_bucket())).await?,
        dispatch: messages(store, &names.dispatch_stream()).await?,
        events: messages(store, &names.events_stream()).await?,
        a0_rss_kib: a0.rss_kib()?,
        a0_fds: a0.open_fds().await,
        server_rss_kib,
    })
}

/// Messages in stream `name`; tried for up to 10 s while the client reconnects.
async fn messages(store: &Store, name: &str) -> Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info = async {
            store.js.get_stream(name).await?.info().await.map(|i| i.state.messages).map_err(anyhow::Error::from)
        };
        match info.await {
            Ok(n) => return Ok(n),
            Err(e) if Instant::now() > deadline => return Err(e.context(format!("reading stream {name}"))),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

#[derive(Debug, Default, Clone, Copy, Serialize)]
pub(super) struct Fired {
    pub seconds: i64,
    pub expected: usize,
    pub once: usize,
    pub twice: usize,
    pub not_run: usize,
    pub not_run_in_outage: usize,
}

/// How often each job ran for each second of `[from, to)`, from the files the jobs wrote.
/// A fire not run counts as in an outage when nats-server was down within 5 s of it.
pub(super) fn judge_fires(
    names: &[String],
    fires: &Path,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    outages: &[(DateTime<Utc>, DateTime<Utc>)],
) -> Result<Fired> {
    let margin = chrono::Duration::seconds(5);
    let in_outage = |at: DateTime<Utc>| outages.iter().any(|(down, up)| at >= *down - margin && at <= *up + margin);
    let seconds = (to - from).num_seconds();
    let mut fired = Fired { seconds, expected: names.len() * seconds as usize, ..Default::default() };
    for name in names {
        let text = std::fs::read_to_string(fires.join(name)).unwrap_or_default();
        let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
        for line in text.lines() {
            let at = DateTime::parse_from_rfc3339(line.trim()).with_context(|| format!("job {name} wrote {line:?}"))?;
            *counts.entry(at.timestamp()).or_default() += 1;
        }
        for second in from.timestamp()..from.timestamp() + seconds {
            match counts.get(&second).copied().unwrap_or(0) {
                0 if in_outage(DateTime::from_timestamp(second, 0).unwrap_or(from)) => {
                    fired.not_run += 1;
                    fired.not_run_in_outage += 1;
                }
                0 => fired.not_run += 1,
                1 => fired.once += 1,
                _ => fired.twice += 1,
            }
        }
    }
    Ok(fired)
}

/// What grew beyond its bound, judged on the samples a whole `restart_every` after the
/// last crash (those after agent restarts, and the end's when it follows one):
///
/// - runs: per job 6 kept records, up to 5 awaiting the next prune, a prune's markers and
///   two in flight, a quarter more for timing;
/// - leases: not growing from the sample after a crash to the next one. A crash itself
///   leaves expiry markers: nats-server, killed, forgets that it already expired the
///   release markers (5 s TTL) of the runs since its last restart, expires them again and
///   places a marker for each, which lasts `LEASE_MARKER_TTL` (15 min);
/// - dispatch: the messages of runs in flight;
/// - agent a0's RSS (a quarter and 4 MiB more than at the baseline) and open descriptors
///   (8 more, and four for each job: a run prepared ahead of its fire holds three pipes and
///   a pidfd, and a0 may hold every job's next run while another agent restarts).
///
/// The events stream is bounded by its own limits (`[layout] events_max_msgs`): reported,
/// not judged.
fn judge_flat(samples: &[Sample], jobs: usize) -> Vec<String> {
    let jobs = jobs as u64;
    let baseline = samples[2];
    let mut grew = Vec::new();
    let mut check = |what: &str, at: &Sample, value: u64, bound: u64| {
        if value > bound {
            grew.push(format!("{what} {value} > {bound} at {} s", at.at_s));
        }
    };
    for (i, settled) in samples.iter().enumerate().skip(2) {
        let before = &samples[i - 1];
        let a_round_after_a_crash = match settled.after {
            Event::AgentRestart => true,
            Event::End => before.after == Event::AgentRestart,
            Event::ServerCrash => false,
        };
        if !a_round_after_a_crash {
            continue;
        }
        check("runs messages", settled, settled.runs, jobs * 18 * 5 / 4);
        if before.after == Event::ServerCrash {
            check("leases messages", settled, settled.leases, before.leases + jobs);
        }
        check("dispatch messages", settled, settled.dispatch, jobs * 3);
        check("a0 RSS KiB", settled, settled.a0_rss_kib, baseline.a0_rss_kib * 5 / 4 + 4096);
        check("a0 fds", settled, settled.a0_fds as u64, baseline.a0_fds as u64 + 4 * jobs + 8);
    }
    grew
}

//! Lateness as users feel it: N jobs (every second by default) on agents running as separate
//! processes, added with the CLI, each job reporting its own clock; beside it the anchor,
//! measured in the same run.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::anchor::{self, sleep_until};
use super::deployment::{Cpu, Deployment, StoredWindow};
use super::effect;
use super::executions;
use super::percentile;
use cronrun::cli::Ctx;
use cronrun::record::Status;
use cronrun::store::Store;

const NAMESPACE: &str = "benchlate";
/// A shell job's own clock: `date` exec'd by the job's shell prints it.
const SHELL_CLOCK: &str = "date +%s%N";

pub(super) struct LatenessArgs {
    pub jobs: usize,
    pub schedules: Schedules,
    pub seconds: i64,
    pub agents: usize,
    /// A component that logs its own clock first (plugins/clock), instead of a shell job.
    pub wasm: Option<PathBuf>,
    /// The component also publishes one event per fire to a stream of the user's (see
    /// `effect`), timed from the fire to stored.
    pub emit: bool,
    /// nats-server nodes: 1, or 3 (a cluster, the layout and the anchor's stream at R3).
    pub cluster: usize,
}

/// The jobs' schedules (six fields: NATS's scheduler takes the same for the anchor).
pub(super) enum Schedules {
    /// Every job on this one.
    One(String),
    /// Job i at second i mod 60 of every minute: a steady rate, jobs/60 fires a second.
    Spread,
}

impl Schedules {
    fn of(&self, job: usize) -> String {
        match self {
            Schedules::One(schedule) => schedule.clone(),
            Schedules::Spread => format!("{} * * * * *", job % 60),
        }
    }

    fn describe(&self) -> String {
        match self {
            Schedules::One(schedule) => schedule.clone(),
            Schedules::Spread => "S * * * * *, S = the job's number mod 60".into(),
        }
    }
}

/// Jobs fire on their schedules (every second by default) over a window after a warm-up. For each fire: from the fire to
/// the job's own code (the clock a shell job's `date` or the `clock` guest printed), to
/// `started_at` (the runner's release of the run) and to its first output line stored in
/// the logs stream (the job's effect as `logs -f` or a subscriber sees it); and how many times each run's code
/// ran, by its output line in the logs stream (a run that ran twice fails the bench). The
/// anchor runs after, over a window as long: NATS's own message scheduler for Wasm jobs, a
/// plain spawn of the same commands for shell jobs. The agents run with production
/// defaults, but with runner slots for every job when there are more jobs than the
/// default 4,096.
pub(super) async fn run(ctx: &Ctx, a: LatenessArgs) -> Result<()> {
    if a.agents == 0 || a.jobs == 0 || a.seconds <= 0 {
        bail!("bench lateness needs --agents, --jobs and --seconds above 0");
    }
    let schedules: Vec<String> = (0..a.jobs).map(|i| a.schedules.of(i)).collect();
    let mut sharing: HashMap<&str, usize> = HashMap::new();
    for schedule in &schedules {
        *sharing.entry(schedule).or_default() += 1;
    }
    let sharing: Vec<(cronrun::schedule::Schedule, usize)> = sharing
        .into_iter()
        .map(|(text, jobs)| {
            Ok((cronrun::schedule::Schedule::parse(text).map_err(|e| anyhow::anyhow!("--schedule: {e}"))?, jobs))
        })
        .collect::<Result<_>>()?;
    let described = a.schedules.describe();
    // A runner holds at most `slots` runs; one may be handed every job of an instant (of
    // one schedule; spread, jobs/60 an instant, and the slots are more than needed).
    let slots = a.jobs.max(cronrun::runner::RunnerConfig::default().slots);
    let guests = if a.emit { vec![effect::SUBJECTS.to_string()] } else { Vec::new() };
    let runner_toml = format!("slots = {slots}\n");
    let mut deployment =
        Deployment::with_guest_subjects(NAMESPACE, (a.agents, a.cluster), &runner_toml, &guests).await?;
    let store = deployment.store().await?;
    let (idle_per_s, idle_stored_per_s) = idle(&deployment, &store, a.seconds).await?;
    let names: Vec<String> = (0..a.jobs).map(|i| format!("late-{i:05}")).collect();
    let plugin = match &a.wasm {
        Some(path) => Some(deploy_plugin(&deployment, path, &names[0]).await?),
        None => None,
    };
    if a.emit {
        effect::create(deployment.bench_client().await?, a.cluster).await?;
    }
    let code = match &plugin {
        Some(digest) => Code::Wasm { digest, emit: a.emit },
        None => Code::Shell,
    };
    deployment.apply(&jobs_toml(&names, &schedules, code, a.seconds as u32 + 30)).await?;
    let from = whole_second(Utc::now()) + chrono::Duration::seconds(5);
    let to = from + chrono::Duration::seconds(a.seconds);
    let expected: usize = fires_within(&sharing, from, to).values().sum();
    if expected == 0 {
        bail!("--schedule {described:?} does not fire within {} s from {from}: give a longer --seconds", a.seconds);
    }
    let kind = match code {
        Code::Wasm { emit: true, .. } => "Wasm (clock, emitting an event)",
        Code::Wasm { .. } => "Wasm (clock)",
        Code::Shell => "shell",
    };
    eprintln!("{} {kind} jobs ({described}) on {} agents; measuring {from} .. {to}", a.jobs, a.agents);
    // The window's CPU, for what a run costs: at high rates that, not waiting, is the lateness.
    // So are the messages stored (the layout's streams; the job's own event is its effect).
    sleep_until(from).await;
    let (cpu_from, stored) = (deployment.cpu(), StoredWindow::start(&store).await?);
    sleep_until(to).await;
    let cpu_to = deployment.cpu();
    let (server_cpu, agents_cpu) = (cpu_to.0.since(cpu_from.0), cpu_to.1.since(cpu_from.1));
    let (stored, _) = stored.report(&store, expected).await?;
    sleep_until(to + chrono::Duration::seconds(3)).await;
    // The agents stop before the records are read (no prune takes the window's runs away)
    // and before the anchor runs alone on the machine; the server stays.
    deployment.stop_agents().await?;
    let measured = measure(&store, &names, from, to).await?;
    let subjects: HashSet<String> = measured.logs.keys().cloned().collect();
    let executions = executions::count(&store, &subjects).await?;
    // The job's effect as a follower sees it: its first output line stored.
    let mut effect_ms: Vec<f64> = executions
        .first_stored
        .iter()
        .filter_map(|(subject, stored)| Some((*stored - *measured.logs.get(subject)?).num_microseconds()? as f64 / 1e3))
        .collect();
    effect_ms.sort_by(f64::total_cmp);
    drop(store);
    // The effect the user's own stream stored: an event per fire.
    let event_ms = match a.emit {
        true => effect::read(deployment.bench_client().await?, from, to).await?,
        false => Vec::new(),
    };

    // Time to store the schedules before the first fire.
    let from = whole_second(Utc::now()) + chrono::Duration::seconds(5);
    let to = from + chrono::Duration::seconds(a.seconds);
    let anchor_fires = fires_within(&sharing, from, to);
    // A shell command's own CPU, as the plain spawn measures it: what a run's CPU is
    // counted without.
    let mut command_cpu = 0.0;
    let mut anchor_cost = Value::Null;
    let (anchor_name, mut anchor_ms) = if plugin.is_some() {
        let client = deployment.bench_client().await?;
        let server_cpu = || deployment.cpu().0.own;
        let scheduled = anchor::nats_schedules(client, (&schedules, a.cluster), (from, to), server_cpu).await?;
        let fires = scheduled.late_ms.len().max(1) as f64;
        anchor_cost = json!({
            "stored_per_fire": scheduled.stored as f64 / fires,
            "nats_server_cpu_per_fire_us": 1e6 * scheduled.server_cpu_s / fires,
        });
        ("NATS message schedules, fire to stored", scheduled.late_ms)
    } else {
        let before = Cpu::of_self();
        let late = anchor::plain_spawn(SHELL_CLOCK, &anchor_fires).await?;
        // Only the commands are children of this process meanwhile (the agents were
        // reaped when stopped, the server is not until the end).
        command_cpu = Cpu::of_self().since(before).children / late.len().max(1) as f64;
        ("a plain spawn of the same processes, fire to their clock", late)
    };
    deployment.stop().await?;
    anchor_ms.sort_by(f64::total_cmp);
    let anchor_expected: usize = anchor_fires.values().sum();
    if anchor_ms.len() != anchor_expected {
        bail!("the anchor ({anchor_name}) measured {} of {anchor_expected} fires", anchor_ms.len());
    }

    let figures = |ms: &[f64]| json!({ "p50": percentile(ms, 50.0), "p99": percentile(ms, 99.0), "max": ms.last().copied().unwrap_or(f64::NAN) });
    let ratio = percentile(&measured.code_ms, 99.0) / percentile(&anchor_ms, 99.0);
    let runs = measured.code_ms.len().max(1) as f64;
    let agents_total = agents_cpu.own + agents_cpu.children;
    let value = json!({
        "jobs": a.jobs, "schedule": described, "agents": a.agents, "nats_servers": a.cluster, "runner_slots": slots, "seconds": a.seconds, "kind": kind,
        "fires_expected": expected, "fires_ran": measured.code_ms.len(), "fires_not_succeeded": measured.not_succeeded,
        "runs_doubled": executions.doubled, "runs_line_unseen": executions.unseen,
        "job_code_ms": figures(&measured.code_ms), "started_at_ms": figures(&measured.started_ms),
        "dispatched_at_ms": figures(&measured.dispatched_ms), "first_line_stored_ms": figures(&effect_ms),
        "first_line_stored_p99_ratio": percentile(&effect_ms, 99.0) / percentile(&anchor_ms, 99.0),
        "events_stored": event_ms.len(), "event_stored_ms": figures(&event_ms),
        "event_stored_p99_ratio": percentile(&event_ms, 99.0) / percentile(&anchor_ms, 99.0),
        "cpu_s": { "nats_server": server_cpu.own, "agents": agents_cpu.own, "agents_children": agents_cpu.children },
        "stored_per_run": stored, "nats_server_cpu_per_run_us": 1e6 * server_cpu.own / expected.max(1) as f64,
        "stored_per_run_less_idle": stored["total"].as_f64().unwrap_or_default() - idle_stored_per_s * a.seconds as f64 / expected.max(1) as f64,
        "anchor_cost": anchor_cost,
        "agent_cpu_per_run_ms": 1e3 * (agents_total / runs - command_cpu),
        "agents_idle_cpu_ms_per_s": 1e3 * idle_per_s,
        "agent_cpu_per_run_less_idle_ms": 1e3 * ((agents_total - idle_per_s * a.seconds as f64) / runs - command_cpu),
        "command_cpu_ms": 1e3 * command_cpu,
        "job_code_p99_ms_by_minute": measured.code_ms_by_minute.values().map(|ms| percentile(ms, 99.0)).collect::<Vec<_>>(),
        "worst_instants": worst_instants(&measured.code_ms_max_by_instant, 5),
        "anchor": anchor_name, "anchor_ms": figures(&anchor_ms), "anchor_fires": anchor_ms.len(), "p99_ratio": ratio,
    });
    ctx.print(&value, || text(&value))?;
    if measured.no_clock > 0 {
        bail!("{} runs succeeded without printing their clock first: is --wasm the clock plugin?", measured.no_clock);
    }
    if executions.doubled > 0 {
        bail!(
            "{} runs ran their code more than once (their line is in the logs stream more than once)",
            executions.doubled
        );
    }
    if a.emit && event_ms.len() != expected {
        bail!("{} of {expected} fires' events were stored", event_ms.len());
    }
    if measured.code_ms.len() != expected {
        bail!("{} of {expected} fires ran ({} ended otherwise)", measured.code_ms.len(), measured.not_succeeded);
    }
    Ok(())
}

fn text(v: &Value) -> String {
    let ms = |figures: &Value, p: &str| figures[p].as_f64().unwrap_or(f64::NAN);
    let by_minute: Vec<String> = v["job_code_p99_ms_by_minute"]
        .as_array()
        .map(|all| all.iter().map(|p99| format!("{:.1}", p99.as_f64().unwrap_or(f64::NAN))).collect())
        .unwrap_or_default();
    let mut drift = match by_minute.len() > 1 {
        true => format!("\nfire to the job's own code, p99 of each minute: {} ms", by_minute.join(", ")),
        false => String::new(),
    };
    if v["events_stored"].as_u64().is_some_and(|n| n > 0) {
        drift += &format!(
            "\nfire to the job's event stored in the user's stream (its effect) p50 {:.1}, p99 {:.1}, max {:.1} ms \
             ({} events; p99 {:.2} x the anchor's)",
            ms(&v["event_stored_ms"], "p50"),
            ms(&v["event_stored_ms"], "p99"),
            ms(&v["event_stored_ms"], "max"),
            v["events_stored"],
            v["event_stored_p99_ratio"].as_f64().unwrap_or(f64::NAN),
        );
    }
    if let Some(worst) = v["worst_instants"].as_array().filter(|w| !w.is_empty()) {
        let worst: Vec<String> = worst
            .iter()
            .map(|w| {
                format!("{} {:.1} ms", w["at"].as_str().unwrap_or_default(), w["max_ms"].as_f64().unwrap_or(f64::NAN))
            })
            .collect();
        drift += &format!("\nthe latest fire instants (their slowest run): {}", worst.join(", "));
    }
    let summary = format!(
        "{} {} jobs ({}) on {} agents ({} runner slots; NATS: {}) over {} s: fire to the job's own code p50 {:.1} ms, p99 {:.1} ms, \
         max {:.1} ms ({} of {} fires ran, {} ended otherwise; by their output lines in the logs stream, {} ran more than \
         once, {} lines not seen there); fire to started_at p50 {:.1}, p99 {:.1} ms; \
         fire to dispatched_at p50 {:.1}, p99 {:.1}, max {:.1} ms; fire to the first output line stored p50 {:.1}, \
         p99 {:.1}, max {:.1} ms (p99 {:.2} x the anchor's); CPU over the window: nats-server {:.1} s, \
         the agents {:.1} s, their runs' processes {:.1} s; agent CPU per run{}: {:.2} ms, {:.2} ms less the agents' \
         idle work ({:.1} ms of CPU a second, before the jobs were added)\n\
         anchor, {}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} fires); p99 ratio {:.2}",
        v["jobs"],
        v["kind"].as_str().unwrap_or_default(),
        v["schedule"].as_str().unwrap_or_default(),
        v["agents"],
        v["runner_slots"],
        if v["nats_servers"].as_u64() == Some(3) { "a cluster of three, R3" } else { "one server" },
        v["seconds"],
        ms(&v["job_code_ms"], "p50"),
        ms(&v["job_code_ms"], "p99"),
        ms(&v["job_code_ms"], "max"),
        v["fires_ran"],
        v["fires_expected"],
        v["fires_not_succeeded"],
        v["runs_doubled"],
        v["runs_line_unseen"],
        ms(&v["started_at_ms"], "p50"),
        ms(&v["started_at_ms"], "p99"),
        ms(&v["dispatched_at_ms"], "p50"),
        ms(&v["dispatched_at_ms"], "p99"),
        ms(&v["dispatched_at_ms"], "max"),
        ms(&v["first_line_stored_ms"], "p50"),
        ms(&v["first_line_stored_ms"], "p99"),
        ms(&v["first_line_stored_ms"], "max"),
        v["first_line_stored_p99_ratio"].as_f64().unwrap_or(f64::NAN),
        ms(&v["cpu_s"], "nats_server"),
        ms(&v["cpu_s"], "agents"),
        ms(&v["cpu_s"], "agents_children"),
        match v["command_cpu_ms"].as_f64() {
            Some(command) if command > 0.0 => format!(" without the command's own (spawned plainly: {command:.2} ms)"),
            _ => String::new(),
        },
        v["agent_cpu_per_run_ms"].as_f64().unwrap_or(f64::NAN),
        v["agent_cpu_per_run_less_idle_ms"].as_f64().unwrap_or(f64::NAN),
        v["agents_idle_cpu_ms_per_s"].as_f64().unwrap_or(f64::NAN),
        v["anchor"].as_str().unwrap_or_default(),
        ms(&v["anchor_ms"], "p50"),
        ms(&v["anchor_ms"], "p99"),
        ms(&v["anchor_ms"], "max"),
        v["anchor_fires"],
        v["p99_ratio"].as_f64().unwrap_or(f64::NAN),
    );
    summary + &drift + &cost(v)
}

/// What a run cost NATS beside what a fire of the anchor did, when it has a NATS anchor.
fn cost(v: &Value) -> String {
    let number = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let mut line = format!(
        "\nwhat a run cost NATS: {:.2} stored messages ({:.2} less the agents' idle writes: presence, shard leases), \
         nats-server CPU {:.0} us",
        number(&v["stored_per_run"]["total"]),
        number(&v["stored_per_run_less_idle"]),
        number(&v["nats_server_cpu_per_run_us"]),
    );
    let anchor = &v["anchor_cost"];
    if !anchor.is_null() {
        line += &format!(
            "; a fire of the anchor: {:.2} stored messages, nats-server CPU {:.0} us",
            number(&anchor["stored_per_fire"]),
            number(&anchor["nats_server_cpu_per_fire_us"]),
        );
    }
    line
}

/// The agents' CPU a second before they have jobs (leases, presence, timers): what they
/// use whatever they run, shared by few runs at a low rate. Read after `IDLE_SETTLE`, over
/// a third of the window, 4 to 10 s (`/proc` counts in ticks of 10 ms, and the shard
/// leases are renewed together every third of their 10 s TTL: a shorter window may see
/// none of their writes).
/// So are the messages they store meanwhile (presence, shard leases, watermarks): a
/// second's worth of them, per second.
async fn idle(deployment: &Deployment, store: &Store, seconds: i64) -> Result<(f64, f64)> {
    const IDLE_SETTLE: std::time::Duration = std::time::Duration::from_secs(2);
    let window = std::time::Duration::from_secs((seconds as u64 / 3).clamp(4, 10));
    tokio::time::sleep(IDLE_SETTLE).await;
    let (before, stored) = (deployment.cpu().1, StoredWindow::start(store).await?);
    tokio::time::sleep(window).await;
    let idle = deployment.cpu().1.since(before);
    let (stored, _) = stored.report(store, 1).await?;
    let per_s = |total: f64| total / window.as_secs_f64();
    Ok((per_s(idle.own + idle.children), per_s(stored["total"].as_f64().unwrap_or_default())))
}

/// The `n` fire instants whose slowest run was latest, latest first.
fn worst_instants(max_by_instant: &BTreeMap<DateTime<Utc>, f64>, n: usize) -> Vec<Value> {
    let mut all: Vec<_> = max_by_instant.iter().collect();
    all.sort_by(|a, b| b.1.total_cmp(a.1));
    all.into_iter().take(n).map(|(at, ms)| json!({ "at": at.format("%H:%M:%S").to_string(), "max_ms": ms })).collect()
}

/// `cronrun deploy` of the component as the first job; returns its digest for the others.
async fn deploy_plugin(deployment: &Deployment, path: &std::path::Path, name: &str) -> Result<String> {
    let path = path.to_string_lossy();
    let out = deployment.cli(&["--output", "json", "deploy", &path, "--name", name]).await?;
    let report: Value = serde_json::from_str(&out).with_context(|| format!("reading deploy's report {out:?}"))?;
    report["plugin"].as_str().map(str::to_string).context("deploy reported no plugin digest")
}

/// What the jobs run.
#[derive(Clone, Copy)]
enum Code<'a> {
    /// `SHELL_CLOCK`.
    Shell,
    /// The component `digest` (the clock), publishing an event per fire if `emit`.
    Wasm { digest: &'a str, emit: bool },
}

/// Jobs on their `schedules` running `code`, keeping `history` runs, with the defaults
/// users get otherwise (`overlap = "skip"`).
fn jobs_toml(names: &[String], schedules: &[String], code: Code<'_>, history: u32) -> String {
    let what = |name: &str| match code {
        Code::Shell => format!("shell = \"{SHELL_CLOCK}\""),
        Code::Wasm { digest, emit: false } => format!("wasm = {{ plugin = \"{digest}\" }}"),
        Code::Wasm { digest, emit: true } => format!(
            "wasm = {{ plugin = \"{digest}\", config = {{ subject = \"{}\" }}, allow_publish = [\"{}\"] }}",
            effect::subject(name),
            effect::SUBJECTS
        ),
    };
    names
        .iter()
        .zip(schedules)
        .map(|(name, schedule)| {
            format!(
                "[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\n\
                 history = {{ succeeded = {history}, failed = {history} }}\n{}\n",
                what(name)
            )
        })
        .collect()
}

#[derive(Default)]
struct Measured {
    code_ms: Vec<f64>,
    /// Fire to the job's code, by whole minute from the window's start: does it drift?
    code_ms_by_minute: BTreeMap<i64, Vec<f64>>,
    /// The worst of each fire instant: when lateness came, to set beside the agents' logs.
    code_ms_max_by_instant: BTreeMap<DateTime<Utc>, f64>,
    started_ms: Vec<f64>,
    /// Fire to the dispatch (the record's `dispatched_at`): negative, the scheduler's lead
    /// ahead of the fire when it keeps up.
    dispatched_ms: Vec<f64>,
    not_succeeded: usize,
    /// The logs subjects of the runs that ran (their executions are counted there), with
    /// each run's fire.
    logs: HashMap<String, DateTime<Utc>>,
    /// Succeeded without printing a clock first.
    no_clock: usize,
}

/// From the run records of the fires in `[from, to)`, each sorted. One scan of the runs
/// bucket: a scan per job opens a consumer each, minutes at 10,000 jobs.
async fn measure(store: &Store, names: &[String], from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Measured> {
    let names: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    let mut m = Measured::default();
    for r in store.list_all_runs().await? {
        if !names.contains(r.job.as_str()) {
            continue;
        }
        let Some(at) = r.scheduled_at.filter(|t| *t >= from && *t < to) else { continue };
        let printed = r.output.first().and_then(|line| line.trim().parse::<i64>().ok());
        match (r.status, r.started_at, printed) {
            (Status::Succeeded, Some(started), Some(ns)) => {
                m.logs.insert(store.names.logs_subject(&r.job, &r.run_id), at);
                let ms = (ns - at.timestamp_nanos_opt().unwrap_or(0)) as f64 / 1e6;
                m.code_ms.push(ms);
                m.code_ms_by_minute.entry((at - from).num_minutes()).or_default().push(ms);
                let worst = m.code_ms_max_by_instant.entry(at).or_insert(ms);
                *worst = worst.max(ms);
                m.started_ms.push((started - at).num_microseconds().unwrap_or(0) as f64 / 1e3);
                if let Some(dispatched) = r.dispatched_at {
                    m.dispatched_ms.push((dispatched - at).num_microseconds().unwrap_or(0) as f64 / 1e3);
                }
            }
            (Status::Succeeded, Some(_), None) => m.no_clock += 1,
            _ => m.not_succeeded += 1,
        }
    }
    m.code_ms.sort_by(f64::total_cmp);
    m.started_ms.sort_by(f64::total_cmp);
    m.dispatched_ms.sort_by(f64::total_cmp);
    for ms in m.code_ms_by_minute.values_mut() {
        ms.sort_by(f64::total_cmp);
    }
    Ok(m)
}

/// The instants in `[from, to)` at which the jobs fire (UTC), and how many jobs fire at
/// each: `sharing` gives each schedule with the number of jobs on it.
fn fires_within(
    sharing: &[(cronrun::schedule::Schedule, usize)],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> BTreeMap<DateTime<Utc>, usize> {
    let before = from - chrono::Duration::nanoseconds(1);
    let mut fires = BTreeMap::new();
    for (schedule, jobs) in sharing {
        for at in schedule.fires_after(before, chrono_tz::UTC).take_while(|at| *at < to) {
            *fires.entry(at).or_default() += jobs;
        }
    }
    fires
}

pub(super) fn whole_second(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(at.timestamp(), 0).unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_runs_cost_in_nats_is_printed_beside_the_anchors_fire_when_there_is_one() {
        let run = json!({ "stored_per_run": { "total": 12.5 }, "stored_per_run_less_idle": 12.25, "nats_server_cpu_per_run_us": 140.0 });
        let cases = [
            (json!(null), "12.50 stored messages (12.25 less", None),
            (
                json!({ "stored_per_fire": 2.0, "nats_server_cpu_per_fire_us": 30.0 }),
                "CPU 140 us",
                Some("a fire of the anchor: 2.00 stored messages, nats-server CPU 30 us"),
            ),
        ];
        for (anchor, says, anchor_says) in cases {
            let mut v = run.clone();
            v["anchor_cost"] = anchor;
            let line = super::cost(&v);
            assert!(line.contains(says), "{line}");
            assert_eq!(line.contains("a fire of the anchor"), anchor_says.is_some(), "{line}");
            if let Some(anchor_says) = anchor_says {
                assert!(line.contains(anchor_says), "{line}");
            }
        }
    }
}

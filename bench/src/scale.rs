//! Whole agents at scale: N schedules, K `cronrun agent` processes started together leading
//! and loading them (each only its shards' jobs), then one leaving and the others taking
//! its shards over, while every-second jobs record their own fires so that a fire lost or
//! doubled in the handover is seen; then all of them stopped and started again, as in an
//! upgrade (shards read from the snapshots the first start wrote, or with `--grow`, the
//! schedules written while the agents ran, from the snapshots their leaders kept). Beside
//! the first start, its anchor once the agents are stopped: the same passes over the
//! schedules index by processes that only count what they are delivered (`index_anchor`).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use chrono::{Datelike, Utc};
use serde_json::{Value, json};

use super::deployment::{AgentProcess, Deployment};
use super::index_anchor;
use super::lateness::whole_second;
use super::{load, soak};
use cronrun::cli::Ctx;
use cronrun::scheduler::DEFAULT_SHARDS;

const NAMESPACE: &str = "benchscale";
/// How long the agents have to lead every shard and load every job, at start and after one
/// leaves.
const LEAD_WAIT: Duration = Duration::from_secs(1800);

pub(super) struct ScaleArgs {
    pub schedules: usize,
    pub agents: usize,
    /// Every-second jobs among the schedules, judged through the handover.
    pub firing: usize,
    /// The schedules written while the agents run, not before they start.
    pub grow: bool,
}

pub(super) async fn run(ctx: &Ctx, a: ScaleArgs) -> Result<()> {
    if a.agents < 2 || a.firing == 0 || a.schedules <= a.firing {
        bail!("bench scale needs --agents of 2 or more, --firing above 0 and --schedules above --firing");
    }
    let mut deployment = Deployment::start(NAMESPACE, (0, 1), "").await?;
    let fires = deployment.path().join("fires");
    std::fs::create_dir_all(&fires).context("creating the fires directory")?;
    let names: Vec<String> = (0..a.firing).map(|i| format!("fire-{i:04}")).collect();
    deployment.apply(&soak::jobs_toml(&names, &fires)).await?;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
    let load = match a.grow {
        false => {
            write_schedules(&deployment, &a).await?;
            start_agents(&mut deployment, &http, &a, a.schedules).await.context("the agents starting")?
        }
        true => {
            start_agents(&mut deployment, &http, &a, a.firing).await.context("the agents starting")?;
            let start = Instant::now();
            write_schedules(&deployment, &a).await?;
            led_by(&http, &deployment.agents, a.schedules).await.context("the agents leading what was written")?;
            let rss_kib = deployment.agents.iter_mut().map(AgentProcess::rss_kib).collect::<Result<_>>()?;
            // The agents' CPU is counted from their start, the server's with the bench's writes.
            Started { took_s: start.elapsed().as_secs_f64(), rss_kib, cpu_s: None }
        }
    };
    let server_rss_kib = deployment.server_rss_kib();
    eprintln!("{} agents lead every shard and {} jobs after {:.1}s", a.agents, a.schedules, load.took_s);

    // Fires run a few seconds before and after the leaving.
    let from = whole_second(Utc::now()) + chrono::Duration::seconds(2);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let leaving = deployment.agents[0].name.clone();
    let left_at = Instant::now();
    deployment.remove_agent(0).await?;
    let stop_s = left_at.elapsed().as_secs_f64();
    led_by(&http, &deployment.agents, a.schedules).await.context("the agents taking over")?;
    let handover_s = left_at.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(5)).await;
    // The last second judged has had two to run and be written.
    let to = whole_second(Utc::now()) - chrono::Duration::seconds(2);
    let fired = soak::judge_fires(&names, &fires, from, to, &[])?;

    while !deployment.agents.is_empty() {
        deployment.remove_agent(0).await?;
    }
    let restart = start_agents(&mut deployment, &http, &a, a.schedules).await.context("the agents started again")?;
    deployment.stop_agents().await?;
    // A first start passed over the index; one grown while the agents ran did not.
    let anchor = match a.grow {
        true => None,
        false => Some(
            index_anchor::measure(&deployment, a.agents as u32, a.schedules as u64)
                .await
                .context("the anchor: NATS alone passing over the index")?,
        ),
    };
    deployment.stop().await?;

    let value = json!({
        "schedules": a.schedules, "agents": a.agents, "grown": a.grow, "load_s": load.took_s,
        "agents_rss_kib": load.rss_kib, "load_cpu_s": load.cpu_s, "nats_server_rss_kib": server_rss_kib,
        "leaving": leaving, "stop_s": stop_s, "handover_s": handover_s, "fires": fired,
        "restart_s": restart.took_s, "restarted_rss_kib": restart.rss_kib, "restart_cpu_s": restart.cpu_s,
        "anchor_s": anchor.as_ref().map(|x| x.took_s), "anchor_cpu_s": anchor.map(|x| x.cpu_s),
    });
    ctx.print(&value, || text(&value))?;
    if fired.not_run > 0 || fired.twice > 0 {
        bail!("through the handover {} fires did not run and {} ran twice", fired.not_run, fired.twice);
    }
    Ok(())
}

/// Writes the schedules but the firing jobs, and waits until the index holds them all.
async fn write_schedules(deployment: &Deployment, a: &ScaleArgs) -> Result<()> {
    let write_start = Instant::now();
    load::write_jobs(&deployment.store().await?, a.schedules - a.firing, &rare_shapes()).await?;
    eprintln!("wrote {} jobs in {:.1}s", a.schedules - a.firing, write_start.elapsed().as_secs_f64());
    load::filed(&deployment.bench_store().await?, a.schedules).await
}

/// Agents started and leading every shard with all their jobs loaded.
struct Started {
    took_s: f64,
    /// Each agent's resident memory then.
    rss_kib: Vec<u64>,
    /// The CPU seconds that took, the agents' and nats-server's: on these two cores a load
    /// takes as long as their sum over two.
    cpu_s: Option<serde_json::Value>,
}

/// Starts the agents together and waits until they lead every shard and hold `jobs` jobs.
async fn start_agents(
    deployment: &mut Deployment,
    http: &reqwest::Client,
    a: &ScaleArgs,
    jobs: usize,
) -> Result<Started> {
    let (server_before, _) = deployment.cpu();
    let start = Instant::now();
    deployment.add_agents(a.agents).await?;
    led_by(http, &deployment.agents, jobs).await?;
    let took_s = start.elapsed().as_secs_f64();
    let (server, agents) = deployment.cpu();
    let rss_kib = deployment.agents.iter_mut().map(AgentProcess::rss_kib).collect::<Result<_>>()?;
    let cpu_s = json!({ "agents": agents.own, "nats_server": server.since(server_before).own });
    Ok(Started { took_s, rss_kib, cpu_s: Some(cpu_s) })
}

/// Schedules that do not fire while the bench runs: once a year, about half a year from now.
fn rare_shapes() -> Vec<String> {
    let day = Utc::now() + chrono::Duration::days(180);
    let (d, m) = (day.day().min(28), day.month());
    vec![format!("0 0 {d} {m} *"), format!("30 6 {d} {m} *"), format!("15 12 {d} {m} *")]
}

/// Waits until `agents` together lead every shard, each its share (the assignment has
/// settled), and hold `jobs` jobs in their queues.
async fn led_by(http: &reqwest::Client, agents: &[AgentProcess], jobs: usize) -> Result<()> {
    let deadline = Instant::now() + LEAD_WAIT;
    let share = f64::from(DEFAULT_SHARDS) / agents.len() as f64;
    let (mut shards, mut held) = (0.0, 0.0);
    while Instant::now() < deadline {
        let mut shared = true;
        (shards, held) = (0.0, 0.0);
        for agent in agents {
            let [led, queued] = agent.gauges(http, ["cronrun_shards_led", "cronrun_schedules_led"]).await?;
            shared &= led == share.floor() || led == share.ceil();
            shards += led;
            held += queued;
        }
        if shared && shards == f64::from(DEFAULT_SHARDS) && held == jobs as f64 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("after {LEAD_WAIT:?} the agents lead {shards} of {DEFAULT_SHARDS} shards and hold {held} of {jobs} jobs")
}

fn text(v: &Value) -> String {
    let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let mib = |key: &str| -> String {
        let each = v[key].as_array().into_iter().flatten().map(|k| (k.as_u64().unwrap_or(0) / 1024).to_string());
        each.collect::<Vec<_>>().join(", ")
    };
    let cpu = |cpu: &Value| match (cpu["agents"].as_f64(), cpu["nats_server"].as_f64()) {
        (Some(agents), Some(server)) => format!(" (CPU: the agents {agents:.1} s, nats-server {server:.1} s)"),
        _ => String::new(),
    };
    let fired = &v["fires"];
    let anchor = match v["anchor_s"].as_f64() {
        Some(took) => format!(
            "\nanchor, NATS alone: the same {} passes over the index by readers that only count took {took:.1}s \
             (CPU: the readers {:.1} s, nats-server {:.1} s); the first start took {:.2} x that",
            v["agents"],
            v["anchor_cpu_s"]["readers"].as_f64().unwrap_or(f64::NAN),
            v["anchor_cpu_s"]["nats_server"].as_f64().unwrap_or(f64::NAN),
            f("load_s") / took,
        ),
        None => String::new(),
    };
    format!(
        "{} schedules on {} agents{}: every shard led and every job loaded after {:.1}s{}; \
         agents' resident memory {} MiB, nats-server {} MiB\n\
         {} left (SIGTERM, stopped in {:.1}s): its shards led and loaded by the others {:.1}s after it was told\n\
         every-second jobs through the handover: {} of {} fires ran once, {} twice, {} not at all\n\
         all stopped and started again: every shard led and every job loaded after {:.1}s{}; resident memory {} MiB{}",
        v["schedules"],
        v["agents"],
        if v["grown"].as_bool() == Some(true) { ", written while they ran" } else { " started together" },
        f("load_s"),
        cpu(&v["load_cpu_s"]),
        mib("agents_rss_kib"),
        v["nats_server_rss_kib"].as_u64().unwrap_or(0) / 1024,
        v["leaving"].as_str().unwrap_or("?"),
        f("stop_s"),
        f("handover_s"),
        fired["once"],
        fired["expected"],
        fired["twice"],
        fired["not_run"],
        f("restart_s"),
        cpu(&v["restart_cpu_s"]),
        mib("restarted_rss_kib"),
        anchor,
    )
}

//! The anchors a lateness is measured against, in the same run on the same machine: what
//! the same fires cost without cronrun.
//!
//! - `nats_schedules`: NATS's own message scheduler (nats-server 2.14, `Nats-Schedule`
//!   cron headers), fire to the generated message stored in its stream.
//! - `plain_spawn`: the same shell command started by one process for every job at every
//!   whole second, fire to the command's own clock.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use async_nats::HeaderMap;
use async_nats::jetstream::{self, consumer, stream};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::stream::FuturesUnordered;

use cronrun::runner::supervisor::{Plan, shell_is_dash};

const STREAM: &str = "BENCH_ANCHOR";

/// What NATS's scheduler did over the window: for each generated message, milliseconds
/// from its whole second to its store time; the messages its stream stored meanwhile, and
/// the nats-server CPU seconds it took (what a fire costs the server, beside cronrun's).
pub(super) struct Scheduled {
    pub late_ms: Vec<f64>,
    pub stored: u64,
    pub server_cpu_s: f64,
}

/// A message schedule for each of the cron expressions `schedules` (six fields) over
/// `[from, to)`, timed as [`Scheduled`] says (a fire is stored well under a second after
/// its instant here, so the second it was stored in is the one it fired for).
/// `server_cpu` reads nats-server's CPU seconds so far.
pub(super) async fn nats_schedules(
    client: async_nats::Client,
    (schedules, replicas): (&[String], usize),
    (from, to): (DateTime<Utc>, DateTime<Utc>),
    server_cpu: impl Fn() -> f64,
) -> Result<Scheduled> {
    let js = jetstream::new(client);
    let _ = js.delete_stream(STREAM).await;
    let config = stream::Config {
        name: STREAM.into(),
        subjects: vec!["anchor.>".into()],
        allow_message_schedules: true,
        allow_rollup: true,
        num_replicas: replicas,
        ..Default::default()
    };
    let mut anchor = js.create_stream(config).await.context("creating the anchor stream")?;
    // async-nats lets 5,000 acknowledgements be awaited at once; the next publish waits
    // for one of them to be taken, so they are awaited as they come, not all at the end.
    let mut acks = FuturesUnordered::new();
    for (i, schedule) in schedules.iter().enumerate() {
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Schedule", schedule.as_str());
        headers.insert("Nats-Schedule-Target", format!("anchor.fired.{i}").as_str());
        let ack = js.publish_with_headers(format!("anchor.schedule.{i}"), headers, "".into()).await?;
        acks.push(ack.into_future());
        if acks.len() >= 4096 {
            acks.next().await.transpose().context("storing a message schedule")?;
        }
    }
    while let Some(ack) = acks.next().await {
        ack.context("storing a message schedule")?;
    }
    if Utc::now() >= from {
        bail!("storing {} message schedules took past the first fire at {from}", schedules.len());
    }
    let before = anchor.info().await.context("reading the anchor stream")?.state.last_sequence;
    sleep_until(from).await;
    let cpu_from = server_cpu();
    sleep_until(to).await;
    let server_cpu_s = server_cpu() - cpu_from;
    let stored = anchor.info().await.context("reading the anchor stream")?.state.last_sequence - before;
    sleep_until(to + chrono::Duration::seconds(1)).await;
    // Stop the schedules, then read what they stored.
    anchor.purge().filter("anchor.schedule.>").await.context("removing the schedules")?;
    let consumer = anchor
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: "anchor.fired.>".into(),
            ..Default::default()
        })
        .await
        .context("reading the fired messages")?;
    let fired = anchor.info().await?.state.messages;
    let mut messages = consumer.messages().await?.take(fired as usize);
    let mut late_ms = Vec::new();
    while let Some(message) = tokio::time::timeout(Duration::from_secs(10), messages.next()).await.ok().flatten() {
        let message = message.context("reading a fired message")?;
        let stored = message.info().map_err(|e| anyhow::anyhow!("a fired message without info: {e}"))?.published;
        let stored_ns = stored.unix_timestamp_nanos();
        let second_ns = stored_ns - stored_ns % 1_000_000_000;
        if second_ns >= nanos(from) && second_ns < nanos(to) {
            late_ms.push((stored_ns - second_ns) as f64 / 1e6);
        }
    }
    js.delete_stream(STREAM).await.context("removing the anchor stream")?;
    Ok(Scheduled { late_ms, stored, server_cpu_s })
}

/// At each of `fires`, as many processes of COMMAND as it gives, started at once, the
/// processes a run of it starts (see `supervisor::Plan`: where `/bin/sh` is dash, a plain
/// command without the shell); the command prints its clock (ns since the epoch), as the
/// shell jobs do.
pub(super) async fn plain_spawn(command: &str, fires: &BTreeMap<DateTime<Utc>, usize>) -> Result<Vec<f64>> {
    let args = ["shell".to_string(), command.to_string()];
    let Some(plan) = Plan::of(&args, shell_is_dash()) else { bail!("{command:?}: not a shell command") };
    let mut seconds = Vec::new();
    for (&at, &count) in fires {
        let mut commands: Vec<tokio::process::Command> = (0..count).map(|_| plan.command().into()).collect();
        sleep_until(at).await;
        seconds.push(tokio::spawn(async move {
            let spawns = commands.iter_mut().map(tokio::process::Command::output);
            (at, futures::future::join_all(spawns).await)
        }));
    }
    let mut late_ms = Vec::new();
    for second in seconds {
        let (at, outputs) = second.await.context("a spawning task failed")?;
        for output in outputs {
            let output = output.with_context(|| format!("spawning {command:?}"))?;
            let text = String::from_utf8_lossy(&output.stdout);
            let Ok(ns) = text.trim().parse::<i128>() else {
                bail!("{command:?} printed {text:?}, not its clock");
            };
            late_ms.push((ns - nanos(at)) as f64 / 1e6);
        }
    }
    Ok(late_ms)
}

pub(super) async fn sleep_until(at: DateTime<Utc>) {
    tokio::time::sleep((at - Utc::now()).to_std().unwrap_or_default()).await;
}

fn nanos(at: DateTime<Utc>) -> i128 {
    i128::from(at.timestamp()) * 1_000_000_000 + i128::from(at.timestamp_subsec_nanos())
}

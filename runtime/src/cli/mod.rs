//! The `cronrun` command line: one file per command, this one for what they share.

mod add;
mod agent;
mod apply;
mod auth;
mod backfill;
mod bench;
mod calendar;
mod deploy;
mod diff;
mod export;
mod get;
mod import;
mod kill;
mod logs;
mod ls;
mod manifest;
mod new;
mod next;
mod notifications;
mod pause;
mod plan;
pub mod process;
mod rm;
mod runs;
mod secret;
mod status;
mod trigger;
mod up;
mod validate;
mod watch;

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;

use crate::clock::SharedClock;
use crate::names::Names;
use crate::store::{LayoutOptions, Store};

#[derive(Parser)]
#[command(name = "cronrun", version, about = "Distributed cron on NATS JetStream")]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Clone)]
pub struct Global {
    /// NATS server URL(s), comma-separated [default: nats://127.0.0.1:4222]
    #[arg(long, global = true, env = "CRONRUN_NATS")]
    pub nats: Option<String>,
    /// NATS identity: an nkey seed file from `cronrun auth init` or a .creds file
    /// [default: admin.nk of a local `cronrun up`, when readable]
    #[arg(long, global = true, env = "CRONRUN_CREDS")]
    pub creds: Option<String>,
    /// Prefix of every bucket, stream and subject
    #[arg(long, global = true, env = "CRONRUN_NAMESPACE", default_value = "cronrun")]
    pub namespace: String,
    /// The JetStream domain of the servers holding the layout, for a client of a leaf node
    /// of them: JetStream requests go to `$JS.<domain>.API`, which crosses the leaf link.
    /// With `auth init`: also allow every identity the domain's forms of its subjects
    #[arg(long, global = true, env = "CRONRUN_JETSTREAM_DOMAIN")]
    pub jetstream_domain: Option<String>,
    /// Output format
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub output: Output,
    /// Log format on stderr: text for people, json (one object per line) for machines
    #[arg(long, global = true, value_enum, env = "CRONRUN_LOG_FORMAT", default_value = "text")]
    pub log_format: Output,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(Subcommand)]
pub enum Command {
    /// Everything on this machine: a local nats-server (unless --nats), scheduler and runner
    Up(up::UpArgs),
    /// NATS identities per role and the nats-server authorization that goes with them
    #[command(subcommand)]
    Auth(auth::AuthCommand),
    /// The daemon for one host: scheduler and/or runner
    Agent(agent::AgentArgs),
    /// Add a shell job: cronrun add NAME --schedule EXPR -- CMD...
    Add(add::AddArgs),
    /// Create or update the jobs of a TOML file; --owner records whose they are, --prune
    /// removes that owner's jobs the file no longer names
    Apply(apply::ApplyArgs),
    /// What `apply -f FILE` would create, change (field by field) and remove; exit 0 when
    /// nothing differs, 1 when something does, 2 on an error
    Diff(diff::DiffArgs),
    /// The stored jobs as a jobs file that `apply -f` takes back unchanged
    Export(export::ExportArgs),
    /// Jobs from another scheduler's definitions (a crontab); --dry-run shows them
    #[command(subcommand)]
    Import(import::ImportCommand),
    /// Store a Wasm job (a component of the job world with its manifest) and point its job spec at it
    Deploy(deploy::DeployArgs),
    /// Write the schedule into a component built without the Rust SDK (e.g. Python)
    Manifest(manifest::ManifestArgs),
    /// Create a job project (Rust, Python or JavaScript) that builds outside this repository
    New(new::NewArgs),
    /// List jobs
    Ls,
    /// Show one job's spec
    Get(get::GetArgs),
    /// Remove a job (its run history stays until pruned)
    Rm(rm::RmArgs),
    /// Pause a job (or --all): it stops firing
    Pause(pause::PauseArgs),
    /// Resume a paused job (or --all)
    Resume(pause::PauseArgs),
    /// Run a job now; its schedule is untouched
    Trigger(trigger::TriggerArgs),
    /// Run the fires of a past range of a job's schedule, each once
    Backfill(backfill::BackfillArgs),
    /// Calendars of days the jobs naming them in `exclude` do not fire: set, ls, get, rm
    #[command(subcommand)]
    Calendar(calendar::CalendarCommand),
    /// List kept runs: one job's or all, by status and age
    Runs(runs::RunsArgs),
    /// Print a run's output; -f follows it until the run ends
    Logs(logs::LogsArgs),
    /// Stop a running run
    Kill(kill::KillArgs),
    /// Secrets jobs name as { secret = "NAME" }: set, ls (never values), rm
    #[command(subcommand)]
    Secret(secret::SecretCommand),
    /// Notifications delivered and failed (the jobs' `notify` rules)
    Notifications(notifications::NotificationsArgs),
    /// Print the next fire times of a schedule
    Next(next::NextArgs),
    /// Check a jobs file, a schedule, or a stored job
    Validate(validate::ValidateArgs),
    /// Runners and scheduler leases
    Status,
    /// Events as they happen, one line each, until interrupted
    Watch(watch::WatchArgs),
    /// A shell completion script: cronrun completions bash > /etc/bash_completion.d/cronrun
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// The man page, as roff: cronrun man > cronrun.1
    Man,
    /// Measure lateness, dispatch throughput and scheduler load on this machine (results in
    /// docs/benchmarks.md): runs the cronrun-bench binary beside this one
    #[command(disable_help_flag = true)]
    Bench(bench::BenchArgs),
}

impl Command {
    /// Daemons log at info; one-shot commands only warn.
    pub fn is_daemon(&self) -> bool {
        matches!(self, Command::Up(_) | Command::Agent(_))
    }
}

/// What commands share: the global flags, the clock and, once asked for, the store.
pub struct Ctx {
    pub global: Global,
    /// What every command takes "now" from (the system's; one built per process).
    pub clock: SharedClock,
}

impl Ctx {
    /// The context of a command run by the process: the system's clock.
    pub fn new(global: Global) -> Self {
        Ctx { global, clock: crate::clock::system() }
    }

    /// Now, by the command's clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    pub fn nats_url(&self) -> String {
        self.global.nats.clone().unwrap_or_else(|| "nats://127.0.0.1:4222".into())
    }

    /// The identity to connect as: `--creds`, else the admin identity a `cronrun up` on
    /// this host generated, when this user may read it, else none.
    pub fn creds(&self) -> Option<String> {
        if self.global.creds.is_some() {
            return self.global.creds.clone();
        }
        let admin = crate::auth::up_identities_dir(&up::default_data_dir()).join("admin.nk");
        std::fs::File::open(&admin).is_ok().then(|| admin.to_string_lossy().into_owned())
    }

    pub fn names(&self) -> Result<Names> {
        let api = crate::model::jsapi::JsApi::new(self.global.jetstream_domain.as_deref())?;
        Ok(Names::new(&self.global.namespace)?.with_js_api(api))
    }

    pub async fn store(&self) -> Result<Store> {
        let names = self.names()?;
        let creds = self.creds();
        let client = crate::connect::connect(&self.nats_url(), creds.as_deref(), "cronrun-cli").await?;
        let store = Store::open(client, names, &LayoutOptions::default())
            .await
            .context("opening the cronrun layout in NATS")?;
        Ok(store.acting_as(&crate::auth::actor(creds.as_deref())))
    }

    /// Warns on stderr when no live runner serves `pool`: its runs would wait until one
    /// does, and a typo in `pool` would otherwise queue them silently for ever.
    pub async fn warn_if_unserved(&self, store: &Store, pool: &str) {
        let Ok(runners) = store.leases.scan("runner.*").await else { return };
        let served = runners
            .iter()
            .filter_map(|(_, v)| serde_json::from_slice::<crate::runner::RunnerPresence>(&v.value).ok())
            .any(|r| r.pools.iter().any(|p| p == pool));
        if !served {
            eprintln!(
                "warning: no live runner serves pool {pool:?}: its runs wait until one does \
                 (`cronrun status` lists the runners and their pools)"
            );
        }
    }

    /// Publishes the audit event of a CLI write to `job` (`by` is the store's actor).
    pub async fn audit(&self, store: &Store, job: &str, kind: crate::events::EventKind, detail: String) {
        crate::actions::audit(store, &self.clock, job, kind, detail).await;
    }

    pub fn json(&self) -> bool {
        self.global.output == Output::Json
    }

    /// Prints `value` as JSON, or `text()` as text.
    pub fn print<T: Serialize>(&self, value: &T, text: impl FnOnce() -> String) -> Result<()> {
        if self.json() {
            out(&serde_json::to_string_pretty(value)?)?;
        } else {
            let t = text();
            if !t.is_empty() {
                out(t.trim_end())?;
            }
        }
        Ok(())
    }
}

/// Writes `text` and a newline to stdout. False once nobody reads it any more (`| head`
/// has what it wanted): the command should end quietly, not panic as `println!` does.
pub fn out(text: &str) -> Result<bool> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
    }
}

/// An error and its causes on one line, each after a colon, as `{e:#}` writes it, but
/// ending at a cronrun [`Error`](crate::Error): its message says its cause already (the
/// cause it keeps as its source would be said twice).
pub fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&cause.to_string());
        if cause.downcast_ref::<crate::Error>().is_some() {
            break;
        }
    }
    line
}

/// The most a definitions file (`apply -f`, `validate -f`, `import`) may hold: 100,000
/// jobs of a few hundred bytes each fit several times over.
pub const MAX_DEFINITIONS_BYTES: u64 = 64 << 20;

/// `path` read as text, refused past `MAX_DEFINITIONS_BYTES` without reading further
/// (its size is not trusted: `/dev/zero` has none and never ends).
pub fn read_definitions(path: &std::path::Path) -> Result<String> {
    use std::io::Read;
    let origin = path.display();
    let file = std::fs::File::open(path).with_context(|| format!("cannot read {origin}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_DEFINITIONS_BYTES + 1).read_to_end(&mut bytes).with_context(|| format!("cannot read {origin}"))?;
    if bytes.len() as u64 > MAX_DEFINITIONS_BYTES {
        anyhow::bail!("{origin} is over {MAX_DEFINITIONS_BYTES} bytes, the most a definitions file may hold: split it");
    }
    String::from_utf8(bytes)
        .map_err(|e| anyhow::anyhow!("{origin}: not UTF-8 text (byte {})", e.utf8_error().valid_up_to()))
}

pub async fn run(cli: Cli) -> Result<std::process::ExitCode> {
    let ctx = Ctx::new(cli.global);
    match cli.command {
        Command::Up(a) => up::run(&ctx, a).await,
        Command::Auth(a) => auth::run(&ctx, a),
        Command::Agent(a) => agent::run(&ctx, a).await,
        Command::Add(a) => add::run(&ctx, a).await,
        Command::Apply(a) => apply::run(&ctx, a).await,
        // Its exit code says whether anything differs.
        Command::Diff(a) => return diff::run(&ctx, a).await,
        Command::Export(a) => export::run(&ctx, a).await,
        Command::Import(a) => import::run(&ctx, a).await,
        Command::Deploy(a) => deploy::run(&ctx, a).await,
        Command::Manifest(a) => manifest::run(&ctx, a),
        Command::New(a) => new::run(&ctx, a),
        Command::Ls => ls::run(&ctx).await,
        Command::Get(a) => get::run(&ctx, a).await,
        Command::Rm(a) => rm::run(&ctx, a).await,
        Command::Pause(a) => pause::run(&ctx, a, true).await,
        Command::Resume(a) => pause::run(&ctx, a, false).await,
        Command::Trigger(a) => trigger::run(&ctx, a).await,
        Command::Backfill(a) => backfill::run(&ctx, a).await,
        Command::Calendar(a) => calendar::run(&ctx, a).await,
        Command::Runs(a) => runs::run(&ctx, a).await,
        Command::Logs(a) => logs::run(&ctx, a).await,
        Command::Kill(a) => kill::run(&ctx, a).await,
        Command::Secret(a) => secret::run(&ctx, a).await,
        Command::Notifications(a) => notifications::run(&ctx, a).await,
        Command::Next(a) => next::run(&ctx, a).await,
        Command::Validate(a) => validate::run(&ctx, a).await,
        Command::Status => status::run(&ctx).await,
        Command::Watch(a) => watch::run(&ctx, a).await,
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "cronrun", &mut std::io::stdout());
            Ok(())
        }
        Command::Man => {
            let page = clap_mangen::Man::new(<Cli as clap::CommandFactory>::command());
            page.render(&mut std::io::stdout()).context("writing the man page")
        }
        // It becomes `cronrun-bench`; back here only when that could not be run.
        Command::Bench(a) => return Ok(bench::run(&ctx, a)),
    }?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// `2026-11-21T19:30:00Z`, with milliseconds only when there are some.
pub fn fmt_time(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// Left-aligned columns, two spaces apart.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        padded.join("  ").trim_end().to_string()
    };
    let mut out = vec![line(header.iter().map(|h| h.to_string()).collect())];
    out.extend(rows.iter().map(|r| line(r.clone())));
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use anyhow::Context;

    use super::error_line;
    use crate::error::{Error, ErrorKind};

    #[test]
    fn an_error_line_says_each_cause_once() {
        let io = || std::io::Error::other("connection reset");
        let nats = || Error::nats("reading job a", io());
        // As before the error kept its source: the message already says it.
        let bare: anyhow::Error = nats().into();
        assert_eq!(error_line(&bare), "reading job a: connection reset");
        let with_context = Err::<(), _>(nats()).context("cronrun get a").unwrap_err();
        assert_eq!(error_line(&with_context), "cronrun get a: reading job a: connection reset");
        // Other errors' causes are said as `{e:#}` says them.
        let plain = Err::<(), _>(io()).context("writing to stdout").unwrap_err();
        assert_eq!(error_line(&plain), format!("{plain:#}"));
        let text: anyhow::Error = Error::new(ErrorKind::Other, "one line").into();
        assert_eq!(error_line(&text), "one line");
    }
}

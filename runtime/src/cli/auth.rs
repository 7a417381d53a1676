//! `cronrun auth init --dir DIR`: an nkey identity per role and the nats-server
//! `authorization` block that confines each; `cronrun auth permissions ROLE`: one role's
//! allow-lists as JSON, for deployments that manage users with `nsc` instead.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::Ctx;
use crate::auth::{
    Account, IDENTITIES, Identities, PUBLISHER, route_authorization, route_password, server_permissions,
};
use crate::model::roles::Role;
use crate::private_file;
use crate::store::fmt_bytes;

#[derive(Subcommand)]
pub enum AuthCommand {
    /// Create the identities (kept if present) and write auth.conf for nats-server
    Init(InitArgs),
    /// Print one role's publish/subscribe allow-lists as JSON
    Permissions(PermissionsArgs),
    /// Create a plugin signing key (an nkey seed file, 0600) and print its public key, for
    /// `deploy --sign` and the runners' [wasm] trusted_keys
    Keygen(KeygenArgs),
}

#[derive(Args)]
pub struct KeygenArgs {
    /// Where to write the seed; an existing file is never overwritten
    pub file: PathBuf,
}

#[derive(Args)]
pub struct InitArgs {
    /// Directory for the identity files (0600) and auth.conf
    #[arg(long)]
    pub dir: PathBuf,
    /// A subject Wasm jobs may publish to through their runner (repeatable) [default: none]
    #[arg(long = "guest-publish")]
    pub guest_publish: Vec<String>,
    /// A subject the `publisher` identity may publish to (repeatable), e.g. the subjects
    /// of jobs' `on` triggers [default: none, and no publisher user]
    #[arg(long = "publish", value_name = "SUBJECT")]
    pub publish: Vec<String>,
    /// For a cluster: its nodes' route addresses, comma-separated (nats-1:6222,...); writes
    /// cluster-auth.conf, the route user and password and the routes that carry them
    #[arg(long, value_delimiter = ',')]
    pub routes: Vec<String>,
    /// Put the identities in a NATS account of their own (A-Z a-z 0-9 _ -): writes
    /// account.conf, to include inside `accounts { }`, instead of auth.conf
    #[arg(long, value_name = "NAME")]
    pub account: Option<String>,
    /// The account's JetStream file storage (binary units: 512MiB, 4GiB), with --account
    /// [default: 4GiB]
    #[arg(long, value_name = "SIZE")]
    pub max_file: Option<String>,
    /// The account's JetStream memory storage, with --account [default: 64MiB]
    #[arg(long, value_name = "SIZE")]
    pub max_mem: Option<String>,
}

#[derive(Args)]
pub struct PermissionsArgs {
    /// admin, viewer, scheduler or runner
    pub role: String,
    /// As for `auth init`
    #[arg(long = "guest-publish")]
    pub guest_publish: Vec<String>,
}

pub fn run(ctx: &Ctx, command: AuthCommand) -> Result<()> {
    match command {
        AuthCommand::Init(a) => init(ctx, a),
        AuthCommand::Permissions(a) => permissions(ctx, a),
        AuthCommand::Keygen(a) => keygen(ctx, a),
    }
}

fn keygen(ctx: &Ctx, a: KeygenArgs) -> Result<()> {
    let shown = a.file.display();
    if a.file.exists() {
        bail!("{shown} exists: a signing key is never overwritten; choose another file");
    }
    let key = nkeys::KeyPair::new_account();
    let seed = key.seed().map_err(|e| anyhow::anyhow!("creating a key: {e}"))?;
    private_file::write(&a.file, &seed).with_context(|| format!("writing {shown}"))?;
    let public = key.public_key();
    ctx.print(&json!({ "file": shown.to_string(), "public_key": public }), || {
        format!("{public}\nsigning key written to {shown} (0600); trust it on runners with [wasm] trusted_keys = [\"{public}\"]")
    })
}

/// Refuses a subject given to `flag` (`--guest-publish`, `--publish`) that is no subject
/// pattern, or could reach cronrun's or the server's own subjects.
pub(super) fn check_publish_subjects(names: &crate::names::Names, flag: &str, subjects: &[String]) -> Result<()> {
    for subject in subjects {
        if let Some(reserved) = names.grant_reaches_reserved(subject) {
            bail!(
                "{flag} {subject:?} could reach {reserved}, which only cronrun may publish to; give subjects like \"orders.>\""
            );
        }
        if !crate::spec::on::subject_ok(subject) {
            bail!(
                "{flag} {subject:?} is not a subject pattern: give tokens of printable ASCII joined by dots, * or > as whole tokens, not starting with $"
            );
        }
    }
    Ok(())
}

fn init(ctx: &Ctx, a: InitArgs) -> Result<()> {
    let names = ctx.names()?;
    check_publish_subjects(&names, "--guest-publish", &a.guest_publish)?;
    check_publish_subjects(&names, "--publish", &a.publish)?;
    if a.account.is_none() && (a.max_file.is_some() || a.max_mem.is_some()) {
        bail!("--max-file and --max-mem size an account's storage: give --account NAME with them");
    }
    let (max_file, max_mem) = (a.max_file.as_deref().unwrap_or("4GiB"), a.max_mem.as_deref().unwrap_or("64MiB"));
    let account = a.account.as_deref().map(|name| account(name, max_file, max_mem)).transpose()?;
    let cluster = a.dir.join("cluster-auth.conf");
    // Everything is checked before anything is written.
    let cluster_text = match a.routes.is_empty() {
        true => None,
        false => Some(cluster_auth(&cluster, &a.routes)?),
    };
    let ids = Identities::ensure(&a.dir)?;
    let (conf, include) = match &account {
        None => {
            let conf = a.dir.join("auth.conf");
            private_file::write(&conf, &ids.authorization(&names, &a.guest_publish, &a.publish, &[])?)?;
            (conf, "at the top level of nats-server.conf".to_string())
        }
        Some(account) => {
            let conf = a.dir.join("account.conf");
            private_file::write(&conf, &ids.account(account, &names, &a.guest_publish, &a.publish, &[])?)?;
            let limits = format!(
                "JetStream file {}, memory {}",
                fmt_bytes(account.max_file as i64),
                fmt_bytes(account.max_mem as i64)
            );
            (conf, format!("inside accounts {{ }} of nats-server.conf (account {}, {limits})", account.name))
        }
    };
    let mut lines = vec![format!(
        "include {} {include}, by a path relative to that file (nats-server resolves includes so)",
        conf.display()
    )];
    if let Some(text) = cluster_text {
        private_file::write(&cluster, &text)?;
        lines.push(format!(
            "include {} inside cluster {{ }} on every node, with no routes of its own",
            cluster.display()
        ));
    }
    for (name, roles) in IDENTITIES {
        let roles: Vec<&str> = roles.iter().map(|r| r.as_str()).collect();
        lines.push(format!("{}: {}", ids.path(name).display(), roles.join(" + ")));
    }
    let mut files: Vec<String> = IDENTITIES.iter().map(|(n, _)| ids.path(n).to_string_lossy().into_owned()).collect();
    let mut publisher = Value::Null;
    if !a.publish.is_empty() {
        let key = ids.public_key(PUBLISHER)?;
        lines.push(format!(
            "{}: publishes {} (public key {key}; replies to _INBOX.{key}); give --publish again with every later auth init",
            ids.path(PUBLISHER).display(),
            a.publish.join(", ")
        ));
        files.push(ids.path(PUBLISHER).to_string_lossy().into_owned());
        publisher = json!({ "file": ids.path(PUBLISHER), "public_key": key, "subjects": a.publish });
    }
    let account = account.map(|a| json!({ "name": a.name, "max_file": a.max_file, "max_mem": a.max_mem }));
    ctx.print(&json!({ "auth_conf": conf, "account": account, "identities": files, "publisher": publisher }), || {
        lines.join("\n")
    })
}

/// The least file storage an account is given: the two streams that reserve storage at
/// their smallest (`store::MIN_STREAM_BYTES`) and as much again for the buckets.
const MIN_ACCOUNT_FILE: u64 = 4 * crate::store::MIN_STREAM_BYTES as u64;

/// The account of `--account NAME`, its limits parsed from `--max-file` and `--max-mem`.
fn account(name: &str, max_file: &str, max_mem: &str) -> Result<Account> {
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if name.is_empty() || name.len() > 64 || !name.chars().all(valid) {
        bail!("--account {name:?}: give 1 to 64 of A-Z a-z 0-9 _ -, e.g. CRONRUN_PROD");
    }
    let max_file = size("--max-file", max_file)?;
    if max_file < MIN_ACCOUNT_FILE {
        bail!(
            "--max-file {}: cronrun needs at least {} of file storage in its account; give more",
            fmt_bytes(max_file as i64),
            fmt_bytes(MIN_ACCOUNT_FILE as i64)
        );
    }
    Ok(Account { name: name.to_string(), max_file, max_mem: size("--max-mem", max_mem)? })
}

/// A size as `512MiB`, `4GiB`, `1TiB` or bytes; K, M, G and T are binary with or without
/// `iB` or `B` (as nats-server reads `MB`). Up to 1 PiB.
fn size(flag: &str, text: &str) -> Result<u64> {
    let digits = text.trim().find(|c: char| !c.is_ascii_digit()).unwrap_or(text.trim().len());
    let (number, unit) = text.trim().split_at(digits);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => bail!("{flag} {text:?}: give a size like 512MiB or 4GiB"),
    };
    let bytes = number.parse::<u64>().ok().and_then(|n| n.checked_mul(1 << shift)).filter(|&b| b <= 1 << 50);
    bytes.ok_or_else(|| anyhow::anyhow!("{flag} {text:?}: give a size like 512MiB or 4GiB, at most 1PiB"))
}

/// The route user, its password (kept from an earlier run, so that nodes configured before
/// still agree) and the routes with it, for inside `cluster { }`.
fn cluster_auth(path: &std::path::Path, routes: &[String]) -> Result<String> {
    let kept = std::fs::read_to_string(path).ok().and_then(|text| {
        let line = text.lines().find(|l| l.trim_start().starts_with("password:"))?;
        Some(line.split('"').nth(1)?.to_string())
    });
    let password = kept.unwrap_or_else(route_password);
    if let Some(route) = routes.iter().find(|r| r.is_empty() || r.contains(['/', '@', ' ', '"'])) {
        bail!("--routes {route:?}: give host:port, e.g. nats-1:6222");
    }
    Ok(format!(
        "# Written by cronrun auth init: include inside cluster {{ }} on every node.\n{}",
        route_authorization(&password, routes)
    ))
}

fn permissions(ctx: &Ctx, a: PermissionsArgs) -> Result<()> {
    check_publish_subjects(&ctx.names()?, "--guest-publish", &a.guest_publish)?;
    let Some(role) = Role::parse(&a.role) else {
        bail!("role {:?} is not one of admin, viewer, scheduler, runner", a.role);
    };
    // A .creds user keeps the default inbox prefix.
    let names = ctx.names()?;
    let p = names.permissions(role, "_INBOX", &a.guest_publish).with_domain_forms(names.js_api());
    let text = serde_json::to_string_pretty(&server_permissions(&p)).context("printing permissions")?;
    super::out(&text)?;
    Ok(())
}

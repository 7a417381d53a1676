//! `cronrun auth init --dir DIR`: an nkey identity per role and the nats-server
//! `authorization` block that confines each; `cronrun auth permissions ROLE`: one role's
//! allow-lists as JSON, for deployments that manage users with `nsc` instead.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::Ctx;
use crate::auth::{
    IDENTITIES, Identities, PUBLISHER, route_authorization, route_password, server_permissions, write_private,
};
use crate::model::roles::Role;

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
    write_private(&a.file, &seed).with_context(|| format!("writing {shown}"))?;
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
    let cluster = a.dir.join("cluster-auth.conf");
    // Everything is checked before anything is written.
    let cluster_text = match a.routes.is_empty() {
        true => None,
        false => Some(cluster_auth(&cluster, &a.routes)?),
    };
    let ids = Identities::ensure(&a.dir)?;
    let conf = a.dir.join("auth.conf");
    write_private(&conf, &ids.authorization(&names, &a.guest_publish, &a.publish, &[])?)?;
    let mut lines = vec![format!(
        "include {} at the top level of nats-server.conf, by a path relative to that file (nats-server resolves includes so)",
        conf.display()
    )];
    if let Some(text) = cluster_text {
        write_private(&cluster, &text)?;
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
    ctx.print(&json!({ "auth_conf": conf, "identities": files, "publisher": publisher }), || lines.join("\n"))
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
    let p = ctx.names()?.permissions(role, "_INBOX", &a.guest_publish);
    let text = serde_json::to_string_pretty(&server_permissions(&p)).context("printing permissions")?;
    super::out(&text)?;
    Ok(())
}

//! The NATS permissions of each cronrun role, derived from [`Names`](crate::names::Names): the one place that
//! says which subjects a role publishes to and subscribes to. `cronrun auth init` writes
//! them into nats-server's `authorization` block; docs/security.md explains each line.
//!
//! JetStream is reached through subjects, so "may read a bucket" is a set of API subjects
//! (`$JS.API.STREAM.INFO.KV_x`, direct gets, ordered consumers) and "may write a key" is a
//! publish to `$KV.<bucket>.<key>`. Replies come to the identity's own inbox prefix
//! (`_INBOX.<public key>`), so no identity reads the answers meant for another.
//!
//! Here: roles and what a permission set is; `lists.rs`: each role's allow-lists.

mod lists;
#[cfg(test)]
mod tests;

use serde::Serialize;

use crate::jsapi::JsApi;
use crate::names::pattern_covers;

pub use lists::{CHAIN_CONSUMER, NOTIFY_CONSUMER};

/// What an identity is for. An agent holds the roles it runs (`scheduler`, `runner`);
/// guests (Wasm jobs) hold none: they reach NATS only through their runner's host checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Everything the CLI writes: jobs, deploy, pause, trigger, kill, rm.
    Admin,
    /// Reads only: ls, get, runs, logs, status.
    Viewer,
    /// Fires schedules: reads jobs, leads shards, publishes dispatches, records lost runs.
    Scheduler,
    /// Executes runs: pulls dispatches, writes records and run leases, publishes output.
    Runner,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Admin, Role::Viewer, Role::Scheduler, Role::Runner];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Viewer => "viewer",
            Role::Scheduler => "scheduler",
            Role::Runner => "runner",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// Publish and subscribe allow-lists (nats-server semantics: `*` one token, `>` the rest).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Permissions {
    pub publish: Vec<String>,
    pub subscribe: Vec<String>,
    /// Publishes refused though an allowed pattern covers them: the server checks these
    /// first. No identity has `allow_responses` (answering any reply subject a message
    /// carries): a client holding it can send itself a request whose reply subject is any
    /// subject at all, and "answer" it (docs/security.md).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub publish_deny: Vec<String>,
}

impl Permissions {
    /// The union of two roles' permissions, for an agent that runs both.
    pub fn union(mut self, other: Permissions) -> Permissions {
        for s in other.publish {
            if !self.publish.contains(&s) {
                self.publish.push(s);
            }
        }
        for s in other.subscribe {
            if !self.subscribe.contains(&s) {
                self.subscribe.push(s);
            }
        }
        // Refused to the union only where refused to both: a right one role needs is kept.
        self.publish_deny.retain(|d| other.publish_deny.contains(d));
        self
    }

    /// These permissions with, beside each subject of the publish lists, its form in the
    /// JetStream domain of `api` (see `jsapi`), so that one authorization serves clients
    /// of the hub (plain forms) and of its leaf nodes (domain forms). Never a right more:
    /// an allowed domain form reaches through the hub's mapping exactly the plain subject
    /// it mirrors, and every refusal is refused in its domain form too (a refusal's form
    /// may refuse more, never less). An allowed pattern whose token after `$JS.API.` is a
    /// wildcard gets no domain form: `$JS.<d>.API.>` would also reach `$JS.<d>.API.$KV.>`,
    /// every key of every bucket. Subscriptions are to inboxes and plain subjects: as they are.
    pub fn with_domain_forms(mut self, api: &JsApi) -> Permissions {
        let mirrors = |list: &[String], allow: bool| -> Vec<String> {
            list.iter()
                .filter(|p| !allow || !api_token_is_wildcard(p))
                .filter_map(|p| api.domain_form(p))
                .filter(|d| !list.contains(d))
                .collect()
        };
        let (publish, deny) = (mirrors(&self.publish, true), mirrors(&self.publish_deny, false));
        self.publish.extend(publish);
        self.publish_deny.extend(deny);
        self
    }

    /// Whether a publish to `subject` is allowed.
    pub fn may_publish(&self, subject: &str) -> bool {
        self.publish.iter().any(|p| pattern_covers(p, subject))
            && !self.publish_deny.iter().any(|p| pattern_covers(p, subject))
    }

    /// Whether subscribing to `subject` is allowed.
    pub fn may_subscribe(&self, subject: &str) -> bool {
        self.subscribe.iter().any(|p| pattern_covers(p, subject))
    }
}

/// Whether `pattern` is `$JS.API.*…` or `$JS.API.>`: a pattern of the whole API, whose
/// domain form would reach the KV and object store subjects too.
fn api_token_is_wildcard(pattern: &str) -> bool {
    pattern.strip_prefix("$JS.API.").is_some_and(|rest| matches!(rest.split('.').next(), Some("*" | ">")))
}

/// The inbox prefix of the identity with public key `public_key`: its replies and the
/// deliveries of its ordered consumers arrive under it.
pub fn inbox_prefix(public_key: &str) -> String {
    format!("_INBOX.{public_key}")
}

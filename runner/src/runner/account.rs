//! Who a shell job runs as: the job's `user`/`group`, else the runner's
//! `[runner] default_user`, else the runner's own user. A runner running as root never
//! runs a job as root unless `[runner] allow_root = true`: a job that names no user on such
//! a runner fails with a line saying what to set, rather than running with every right of
//! the host. Switching needs root; a runner that is not root runs jobs as itself only.
//!
//! The switch itself happens in the run's supervisor (see `supervisor`), which stays root
//! so that it can end the job's whole tree: the job's process gets the uid and gid, and no
//! supplementary groups.

use std::path::PathBuf;

use super::RunnerConfig;
use cronrun_model::spec::ShellSpec;

/// Why a run cannot run as whom its job or runner names; each says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccountError {
    #[error(
        "it would run as root: name a user in the job (shell.user), set [runner] default_user, \
         or allow it with [runner] allow_root = true"
    )]
    RootRefused,
    /// `what` is whom the job wanted: "the job's group", "user \"alice\"".
    #[error(
        "the runner runs as uid {runner_uid}, not root, and cannot switch to {what}: run the agent as root or drop it"
    )]
    NotRoot { runner_uid: u32, what: String },
    #[error("there is no user {0:?} on this runner")]
    NoUser(String),
    #[error("there is no group {0:?} on this runner")]
    NoGroup(String),
}

/// A user the job can run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

/// The decision for one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunAs {
    /// The runner's own user and group: nothing to switch.
    Runner,
    /// Switch to this uid and gid; HOME, USER and LOGNAME are the account's.
    Account(Account),
}

/// The host's user and group database (passwd and group, via NSS).
pub trait Accounts {
    fn user_by_name(&self, name: &str) -> Option<Account>;
    fn user_by_uid(&self, uid: u32) -> Option<Account>;
    fn group_by_name(&self, name: &str) -> Option<u32>;
}

/// The real database of this host.
pub struct HostAccounts;

impl Accounts for HostAccounts {
    fn user_by_name(&self, name: &str) -> Option<Account> {
        nix::unistd::User::from_name(name).ok().flatten().map(account)
    }
    fn user_by_uid(&self, uid: u32) -> Option<Account> {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten().map(account)
    }
    fn group_by_name(&self, name: &str) -> Option<u32> {
        nix::unistd::Group::from_name(name).ok().flatten().map(|g| g.gid.as_raw())
    }
}

fn account(u: nix::unistd::User) -> Account {
    Account { name: u.name, uid: u.uid.as_raw(), gid: u.gid.as_raw(), home: u.dir }
}

/// Whom a run of `spec` runs as on a runner whose effective uid is `runner_uid`; Err is the
/// run's error, one line saying what to change.
pub fn decide(
    spec: &ShellSpec,
    policy: &RunnerConfig,
    runner_uid: u32,
    db: &impl Accounts,
) -> Result<RunAs, AccountError> {
    let wanted = spec.user.as_ref().or(policy.default_user.as_ref());
    let Some(wanted) = wanted else {
        if runner_uid == 0 && !policy.allow_root {
            return Err(AccountError::RootRefused);
        }
        return match &spec.group {
            None => Ok(RunAs::Runner),
            Some(_) if runner_uid != 0 => Err(not_root(runner_uid, "the job's group")),
            Some(group) => {
                let me = db.user_by_uid(0).unwrap_or_else(|| numeric(0));
                Ok(RunAs::Account(Account { gid: group_id(group, db)?, ..me }))
            }
        };
    };
    let mut account = match wanted.parse::<u32>() {
        Ok(uid) => db.user_by_uid(uid).unwrap_or_else(|| numeric(uid)),
        Err(_) => db.user_by_name(wanted).ok_or_else(|| AccountError::NoUser(wanted.clone()))?,
    };
    if let Some(group) = &spec.group {
        account.gid = group_id(group, db)?;
    }
    if account.uid == 0 && !policy.allow_root {
        return Err(AccountError::RootRefused);
    }
    if runner_uid != 0 {
        return match db.user_by_uid(runner_uid) {
            Some(me) if me.uid == account.uid && me.gid == account.gid => Ok(RunAs::Runner),
            _ => Err(not_root(runner_uid, &format!("user {wanted:?}"))),
        };
    }
    Ok(RunAs::Account(account))
}

fn not_root(runner_uid: u32, what: &str) -> AccountError {
    AccountError::NotRoot { runner_uid, what: what.to_string() }
}

/// A uid without a passwd entry: its own number as group, `/` as home.
fn numeric(uid: u32) -> Account {
    Account { name: uid.to_string(), uid, gid: uid, home: PathBuf::from("/") }
}

fn group_id(group: &str, db: &impl Accounts) -> Result<u32, AccountError> {
    match group.parse::<u32>() {
        Ok(gid) => Ok(gid),
        Err(_) => db.group_by_name(group).ok_or_else(|| AccountError::NoGroup(group.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Db;
    impl Accounts for Db {
        fn user_by_name(&self, name: &str) -> Option<Account> {
            [self.user_by_uid(0), self.user_by_uid(1000), self.user_by_uid(65534)]
                .into_iter()
                .flatten()
                .find(|a| a.name == name)
        }
        fn user_by_uid(&self, uid: u32) -> Option<Account> {
            let (name, home) = match uid {
                0 => ("root", "/root"),
                1000 => ("alice", "/home/alice"),
                65534 => ("nobody", "/nonexistent"),
                _ => return None,
            };
            Some(Account { name: name.into(), uid, gid: uid, home: home.into() })
        }
        fn group_by_name(&self, name: &str) -> Option<u32> {
            (name == "backup").then_some(34)
        }
    }

    fn shell(user: Option<&str>, group: Option<&str>) -> ShellSpec {
        ShellSpec { user: user.map(Into::into), group: group.map(Into::into), ..ShellSpec::default() }
    }

    fn switch(name: &str, uid: u32, gid: u32, home: &str) -> Result<RunAs, &'static str> {
        Ok(RunAs::Account(Account { name: name.into(), uid, gid, home: home.into() }))
    }

    #[test]
    fn who_a_job_runs_as() {
        let strict = RunnerConfig::default();
        let nobody_default = RunnerConfig { default_user: Some("nobody".into()), ..RunnerConfig::default() };
        let root_ok = RunnerConfig { allow_root: true, ..RunnerConfig::default() };
        let refused = Err::<RunAs, &'static str>;
        // (job user, job group, policy, runner uid) -> the decision, or a word of the error.
        type Case<'a> = (Option<&'a str>, Option<&'a str>, &'a RunnerConfig, u32, Result<RunAs, &'a str>);
        let cases: Vec<Case> = vec![
            // A root runner: a named user is switched to, root itself only when allowed.
            (Some("alice"), None, &strict, 0, switch("alice", 1000, 1000, "/home/alice")),
            (Some("alice"), Some("backup"), &strict, 0, switch("alice", 1000, 34, "/home/alice")),
            (Some("4242"), Some("7"), &strict, 0, switch("4242", 4242, 7, "/")),
            (None, None, &strict, 0, refused("allow_root")),
            (Some("root"), None, &strict, 0, refused("allow_root")),
            (Some("0"), None, &strict, 0, refused("allow_root")),
            (None, None, &nobody_default, 0, switch("nobody", 65534, 65534, "/nonexistent")),
            (Some("alice"), None, &nobody_default, 0, switch("alice", 1000, 1000, "/home/alice")),
            (None, None, &root_ok, 0, Ok(RunAs::Runner)),
            (Some("root"), None, &root_ok, 0, switch("root", 0, 0, "/root")),
            (None, Some("backup"), &root_ok, 0, switch("root", 0, 34, "/root")),
            (Some("mallory"), None, &strict, 0, refused("no user \"mallory\"")),
            (Some("alice"), Some("wheel"), &strict, 0, refused("no group \"wheel\"")),
            // A runner that is not root runs jobs as itself, and nothing else.
            (None, None, &strict, 1000, Ok(RunAs::Runner)),
            (Some("alice"), None, &strict, 1000, Ok(RunAs::Runner)),
            (Some("1000"), None, &strict, 1000, Ok(RunAs::Runner)),
            (Some("nobody"), None, &strict, 1000, refused("not root")),
            (None, None, &nobody_default, 1000, refused("not root")),
            (None, Some("backup"), &strict, 1000, refused("not root")),
            (Some("root"), None, &strict, 1000, refused("allow_root")),
        ];
        for (user, group, policy, runner, want) in cases {
            let got = decide(&shell(user, group), policy, runner, &Db);
            match (&got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g, &w, "{user:?} {group:?} on uid {runner}"),
                (Err(e), Err(needle)) => {
                    let e = e.to_string();
                    assert!(e.contains(needle) && !e.contains('\n'), "{user:?} {group:?} on uid {runner}: {e}")
                }
                _ => panic!("{user:?} {group:?} on uid {runner}: got {got:?}"),
            }
        }
    }
}

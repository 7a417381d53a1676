//! A run's whole process tree, including what left its process group (`setsid`, a double
//! fork), where the run has no PID namespace (see `contain`). The supervisor makes itself
//! a child subreaper, so every orphaned descendant of the job becomes its child;
//! `kill_tree` then stops and ends the group and every descendant until none is left.
//! Linux only (`PR_SET_CHILD_SUBREAPER`, `/proc`).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpgrp, getpid};

/// Rounds of scan, stop and kill: a process that keeps forking is stopped (it cannot
/// fork once stopped) before the whole tree is killed.
const ROUNDS: usize = 200;

/// Whether orphaned descendants become our children (see `become_subreaper`).
static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// Orphaned descendants become our children from now on.
pub fn become_subreaper() -> bool {
    let done = nix::sys::prctl::set_child_subreaper(true).is_ok();
    SUBREAPER.store(done, Ordering::SeqCst);
    done
}

/// Kills every other process of our group and every descendant of ours, until none is
/// left, and reaps them. We stay alive to see it done. Each scan SIGSTOPs what it finds
/// that was not stopped yet (a stopped process forks no more; children it made before
/// are its descendants, found by the next scan); once a scan finds nothing new, all are
/// KILLed together.
///
/// A job that left nothing behind costs no scan of `/proc`: every living descendant is a
/// child of ours or of another living descendant (orphans are re-parented to us, the
/// subreaper, as their parent exits), so with no child left there is none, and the
/// group holds nobody but us (only the job's processes join it). Not being a subreaper,
/// an orphan goes to init and only the scan finds it.
pub fn kill_tree() {
    if SUBREAPER.load(Ordering::SeqCst) && !has_children() {
        return;
    }
    let (me, group) = (getpid(), getpgrp());
    let mut stopped = HashSet::new();
    for _ in 0..ROUNDS {
        let targets = members(me, group);
        if targets.is_empty() {
            break;
        }
        let new: Vec<Pid> = targets.iter().copied().filter(|pid| !stopped.contains(pid)).collect();
        if new.is_empty() {
            for pid in &targets {
                let _ = kill(*pid, Signal::SIGKILL);
            }
            reap();
            stopped.clear();
            std::thread::sleep(Duration::from_millis(2));
            continue;
        }
        for pid in new {
            let _ = kill(pid, Signal::SIGSTOP);
            stopped.insert(pid);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    reap();
}

/// Our descendants and the other members of our group (and their descendants), zombies
/// left out.
fn members(me: Pid, group: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let procs: Vec<(i32, i32, i32)> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me.as_raw())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (state, ppid, pgrp) = parse_stat(&stat)?;
            (state != 'Z').then_some((pid, ppid, pgrp))
        })
        .collect();
    let mut found: HashSet<i32> = procs
        .iter()
        .filter(|(_, ppid, pgrp)| *ppid == me.as_raw() || *pgrp == group.as_raw())
        .map(|(pid, _, _)| *pid)
        .collect();
    // Descendants of what was found, generation by generation.
    loop {
        let more: Vec<i32> = procs
            .iter()
            .filter(|(pid, ppid, _)| found.contains(ppid) && !found.contains(pid))
            .map(|(pid, _, _)| *pid)
            .collect();
        if more.is_empty() {
            break;
        }
        found.extend(more);
    }
    found.into_iter().map(Pid::from_raw).collect()
}

/// State, parent and process group from `/proc/<pid>/stat` (`pid (comm) S ppid pgrp ...`;
/// the command name may hold spaces and parentheses, so fields are read after the last `)`).
fn parse_stat(stat: &str) -> Option<(char, i32, i32)> {
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    Some((state, fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

/// Whether a child of ours still lives (ended ones are reaped on the way).
fn has_children() -> bool {
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Err(nix::errno::Errno::ECHILD) => return false,
            Ok(WaitStatus::StillAlive) | Err(_) => return true,
            Ok(_) => {}
        }
    }
}

/// Collects every child that has ended.
pub(crate) fn reap() {
    while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn stat_lines_parse_whatever_the_command_name() {
        assert_eq!(super::parse_stat("42 (sh) S 1 42 42 0 -1"), Some(('S', 1, 42)));
        assert_eq!(super::parse_stat("7 (a) b (c)) Z 3 9 9"), Some(('Z', 3, 9)));
        assert_eq!(super::parse_stat("garbage"), None);
    }
}

//! A run's whole process tree, including what left its process group (`setsid`, a double
//! fork). The supervisor makes itself a child subreaper, so every orphaned descendant of
//! the job becomes its child; `kill_tree` then ends the group and those children until
//! none is left. Linux only (`PR_SET_CHILD_SUBREAPER`, `/proc`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpgrp, getpid};

/// Rounds of kill and reap: each round reaches one more generation of re-parented
/// orphans; a fork bomb outrunning this many is left to the runner's group kill.
const ROUNDS: usize = 100;

/// Whether orphaned descendants become our children (see `become_subreaper`).
static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// Orphaned descendants become our children from now on.
pub fn become_subreaper() -> bool {
    let done = nix::sys::prctl::set_child_subreaper(true).is_ok();
    SUBREAPER.store(done, Ordering::SeqCst);
    done
}

/// Kills every other process of our group and every child of ours, until none is left,
/// and reaps them. We stay alive to see it done.
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
    for _ in 0..ROUNDS {
        let targets = members(me, group);
        if targets.is_empty() {
            break;
        }
        for pid in targets {
            let _ = kill(pid, Signal::SIGKILL);
        }
        reap();
        std::thread::sleep(Duration::from_millis(5));
    }
    reap();
}

/// Our children and the other members of our group, zombies left out.
fn members(me: Pid, group: Pid) -> Vec<Pid> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me.as_raw())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (state, ppid, pgrp) = parse_stat(&stat)?;
            (state != 'Z' && (ppid == me.as_raw() || pgrp == group.as_raw())).then(|| Pid::from_raw(pid))
        })
        .collect()
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
fn reap() {
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

//! Process-group helpers from /proc, for tests that check what a run left behind.
#![allow(dead_code)]

/// The process group of `pid`.
pub fn pgrp_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat[stat.rfind(')').unwrap() + 2..].split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// The parent of `pid`.
pub fn parent_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat[stat.rfind(')').unwrap() + 2..].split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Processes whose process group is `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // Fields after the command (which may hold spaces) start after the last ')'.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields[0] != "Z" && fields[2].parse::<i32>() == Ok(pgid) {
            out.push(pid);
        }
    }
    out
}

/// Whether every thread of `pid` is stopped: a SIGSTOP has taken effect, not only been sent
/// (a thread running on another CPU goes on until it is interrupted).
pub fn all_threads_stopped(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().all(|task| {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()) == Some("T")
    })
}

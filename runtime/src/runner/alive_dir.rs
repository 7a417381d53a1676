//! The directory of a runner's keepalive files (see `supervisor`), in the temp dir. It is
//! removed with the runner, but a runner killed (SIGKILL, the OOM killer, a crash) leaves
//! it behind: one directory and a few empty files each time. So a runner holds a lock on
//! its directory while it lives, and a runner starting removes those nobody holds and
//! nobody touched for a while. The prefix is new with the lock: directories of older
//! runners (`cronrun-alive-*`), unlocked though alive, are never taken for left behind.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::fcntl::{Flock, FlockArg};
use tracing::{info, warn};

const PREFIX: &str = "cronrun-keepalive-";

/// A directory that it or a file in it changed less than this ago is left alone even when
/// unlocked: its runner may have made it and not locked it yet, or lost the lock (the
/// directory removed by a cleaner and made again by `Held::touch_alive`). A live run's
/// keepalive file is touched every heartbeat.
const SETTLED: Duration = Duration::from_secs(60);

/// This runner's keepalive directory, locked until dropped.
pub(super) struct AliveDir {
    dir: tempfile::TempDir,
    _lock: Option<Flock<File>>,
}

impl AliveDir {
    /// Makes the directory, after removing those of runners that are gone.
    pub fn make() -> std::io::Result<Self> {
        let removed = remove_left_behind(&std::env::temp_dir(), SystemTime::now());
        if !removed.is_empty() {
            info!(removed = removed.len(), "removed keepalive directories of runners that are gone");
        }
        let dir = tempfile::Builder::new().prefix(PREFIX).tempdir()?;
        // Without the lock (a file system without flock) it serves all the same, and is
        // taken for left behind once its runner has been idle for `SETTLED`.
        let lock = Flock::lock(File::open(dir.path())?, FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| warn!("locking {}: {e}; it may be removed while idle", dir.path().display()))
            .ok();
        Ok(Self { dir, _lock: lock })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Removes the keepalive directories in `tmp` that no runner holds and that, with the
/// files in them, have not changed for `SETTLED`; returns them.
fn remove_left_behind(tmp: &Path, now: SystemTime) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(tmp) else { return Vec::new() };
    let ours = entries.flatten().filter(|e| e.file_name().to_string_lossy().starts_with(PREFIX));
    let old = |path: &Path| {
        let changed = std::fs::metadata(path).and_then(|m| m.modified());
        changed.is_ok_and(|at| now.duration_since(at).unwrap_or_default() >= SETTLED)
    };
    let settled = |dir: &Path| {
        let files = std::fs::read_dir(dir).map(|files| files.flatten().all(|f| old(&f.path())));
        old(dir) && files.unwrap_or(false)
    };
    let mut removed = Vec::new();
    for path in ours.map(|e| e.path()).filter(|p| p.is_dir() && settled(p)) {
        let Ok(dir) = File::open(&path) else { continue };
        // Held only while it is removed: the runner that held it is gone.
        let Ok(_gone) = Flock::lock(dir, FlockArg::LockExclusiveNonblock) else { continue };
        match std::fs::remove_dir_all(&path) {
            Ok(()) => removed.push(path),
            Err(e) => warn!("removing {} (its runner is gone): {e}", path.display()),
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_directories_no_runner_holds_and_nobody_touched_lately_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let make = |name: &str| {
            let path = tmp.path().join(name);
            std::fs::create_dir(&path).unwrap();
            std::fs::write(path.join("job.run.1"), "").unwrap();
            path
        };
        let [gone, held, young, touched, older_runner, other] = [
            "cronrun-keepalive-gone",
            "cronrun-keepalive-held",
            "cronrun-keepalive-young",
            "cronrun-keepalive-touched",
            "cronrun-alive-older",
            "other",
        ]
        .map(make);
        let lock = Flock::lock(File::open(&held).unwrap(), FlockArg::LockExclusiveNonblock).unwrap();
        let now = SystemTime::now() + SETTLED;
        File::open(&young).unwrap().set_modified(now - SETTLED / 2).unwrap();
        File::options().write(true).open(touched.join("job.run.1")).unwrap().set_modified(now).unwrap();

        assert_eq!(remove_left_behind(tmp.path(), now), std::slice::from_ref(&gone));
        assert!(!gone.exists());
        for kept in [&held, &young, &touched, &older_runner, &other] {
            assert!(kept.exists(), "{}", kept.display());
        }
        drop(lock);
        assert_eq!(remove_left_behind(tmp.path(), now), std::slice::from_ref(&held), "once its runner let go");
    }
}

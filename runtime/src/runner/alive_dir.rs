//! The directory of a runner's keepalive files (see `supervisor`), in the temp dir. It is
//! removed with the runner, but a runner killed (SIGKILL, the OOM killer, a crash) leaves
//! it behind: one directory and a few empty files each time. So a runner holds a lock on
//! its directory while it lives, and a runner starting removes those nobody holds.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::fcntl::{Flock, FlockArg};
use tracing::{info, warn};

const PREFIX: &str = "cronrun-alive-";

/// A directory unchanged for less than this is left alone even when unlocked: its runner
/// may have made it and not locked it yet.
const SETTLED: Duration = Duration::from_secs(60);

/// This runner's keepalive directory, locked until dropped.
pub(super) struct AliveDir {
    dir: tempfile::TempDir,
    _lock: Flock<File>,
}

impl AliveDir {
    /// Makes the directory, after removing those of runners that are gone.
    pub fn make() -> std::io::Result<Self> {
        let removed = remove_left_behind(&std::env::temp_dir(), SystemTime::now());
        if !removed.is_empty() {
            info!(removed = removed.len(), "removed keepalive directories of runners that are gone");
        }
        let dir = tempfile::Builder::new().prefix(PREFIX).tempdir()?;
        let lock = Flock::lock(File::open(dir.path())?, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| e)?;
        Ok(Self { dir, _lock: lock })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Removes the keepalive directories in `tmp` that no runner holds and that have not
/// changed for `SETTLED`; returns them.
fn remove_left_behind(tmp: &Path, now: SystemTime) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(tmp) else { return Vec::new() };
    let ours = entries.flatten().filter(|e| e.file_name().to_string_lossy().starts_with(PREFIX));
    let settled = |path: &Path| {
        let changed = std::fs::metadata(path).and_then(|m| m.modified());
        changed.is_ok_and(|at| now.duration_since(at).unwrap_or_default() >= SETTLED)
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
    fn only_directories_no_runner_holds_and_settled_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let make = |name: &str| {
            let path = tmp.path().join(name);
            std::fs::create_dir(&path).unwrap();
            std::fs::write(path.join("job.run.1"), "").unwrap();
            path
        };
        let (gone, held, young, other) =
            (make("cronrun-alive-gone"), make("cronrun-alive-held"), make("cronrun-alive-young"), make("other"));
        let lock = Flock::lock(File::open(&held).unwrap(), FlockArg::LockExclusiveNonblock).unwrap();
        let now = SystemTime::now() + SETTLED;
        std::fs::File::open(&young).unwrap().set_modified(now - SETTLED / 2).unwrap();

        assert_eq!(remove_left_behind(tmp.path(), now), std::slice::from_ref(&gone));
        assert!(!gone.exists());
        assert!(held.exists() && young.exists() && other.exists());
        drop(lock);
        assert_eq!(remove_left_behind(tmp.path(), now), std::slice::from_ref(&held), "once its runner let go");
    }
}

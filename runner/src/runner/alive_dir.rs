//! The directory of a runner's keepalive files (see `supervisor`), on a memory file system
//! when there is one (`base`). It is removed with the runner, but a runner killed
//! (SIGKILL, the OOM killer, a crash) leaves it behind: one directory and a few empty
//! files each time. So a runner holds a lock on
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
/// directory removed by a cleaner and made again by `ClaimedRun::touch_alive`). A live run's
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
        let base =
            base(&[std::env::var_os("RUNTIME_DIRECTORY"), std::env::var_os("XDG_RUNTIME_DIR"), Some(SHM.into())]);
        // The temp dir too: where earlier versions made it, and where it goes when no
        // other base will do.
        let mut removed = remove_left_behind(&base, SystemTime::now());
        if base != std::env::temp_dir() {
            removed.extend(remove_left_behind(&std::env::temp_dir(), SystemTime::now()));
        }
        if !removed.is_empty() {
            info!(removed = removed.len(), "removed keepalive directories of runners that are gone");
        }
        let dir = tempfile::Builder::new().prefix(PREFIX).tempdir_in(&base)?;
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

/// Shared memory: a memory file system on Linux.
const SHM: &str = "/dev/shm";

/// Where the directory is made: the first of `candidates` (systemd's `RUNTIME_DIRECTORY`,
/// then `XDG_RUNTIME_DIR`, then `/dev/shm`) that is safe to make it in, else the temp dir.
/// Each shell run creates and removes a file there: on ext4, finding a free inode among
/// the many just freed (`find_inode_bit`, `recently_deleted`) took a quarter of a
/// runner's own CPU at 200 runs a second; on tmpfs it costs nearly nothing.
fn base(candidates: &[Option<std::ffi::OsString>]) -> PathBuf {
    let me = nix::unistd::geteuid().as_raw();
    candidates.iter().flatten().map(PathBuf::from).find(|dir| safe_base(dir, me)).unwrap_or_else(std::env::temp_dir)
}

/// Whether `dir` is an absolute directory we may write in, where no one else can tamper
/// with what we make: ours and closed to others (a runtime directory), or root's and
/// sticky (`/dev/shm`, as `/tmp`: others can neither rename nor remove our directory). A
/// root agent started after `su` keeps the other user's `XDG_RUNTIME_DIR`: not taken.
fn safe_base(dir: &Path, uid: u32) -> bool {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Ok(meta) = std::fs::symlink_metadata(dir) else { return false };
    let mode = meta.permissions().mode();
    let private = meta.uid() == uid && mode & 0o022 == 0;
    let sticky = meta.uid() == 0 && mode & 0o1000 != 0;
    let writable = nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK).is_ok();
    dir.is_absolute() && meta.is_dir() && (private || sticky) && writable
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
    fn keepalive_files_go_to_the_first_safe_directory_named_else_the_temp_dir() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = |name: &str, mode: u32| {
            let path = tmp.path().join(name);
            std::fs::create_dir(&path).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            path
        };
        let (run, xdg, open_to_all, group_writable) =
            (dir("run", 0o700), dir("xdg", 0o755), dir("open", 0o777), dir("group", 0o770));
        let (missing, file, link) = (tmp.path().join("missing"), tmp.path().join("a-file"), tmp.path().join("link"));
        std::fs::write(&file, "").unwrap();
        std::os::unix::fs::symlink(&run, &link).unwrap();
        let os = |p: &Path| Some(p.as_os_str().to_owned());
        let relative = Some(std::ffi::OsString::from("relative/dir"));
        // (candidates, chosen)
        let cases: [(Vec<Option<std::ffi::OsString>>, PathBuf); 6] = [
            (vec![os(&run), os(&xdg)], run.clone()),
            (vec![None, os(&xdg)], xdg.clone()),
            (vec![os(&missing), os(&file), os(&link), os(&xdg)], xdg.clone()),
            (vec![os(&open_to_all), os(&group_writable), os(&run)], run.clone()),
            (vec![relative, None], std::env::temp_dir()),
            (vec![], std::env::temp_dir()),
        ];
        for (candidates, chosen) in cases {
            assert_eq!(base(&candidates), chosen, "{candidates:?}");
        }
        // Another user's directory, however closed (a root agent keeping a user's
        // XDG_RUNTIME_DIR), is not taken; a sticky one of root's is.
        let me = nix::unistd::geteuid().as_raw();
        assert!(!safe_base(&run, me + 1), "another user's directory");
        let sticky = dir("sticky", 0o1777);
        assert_eq!(safe_base(&sticky, me), me == 0, "sticky, ours: taken only as root's");
    }

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

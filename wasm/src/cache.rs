//! Compiled components: in memory by digest, linked (bounded, most recently used kept),
//! and on disk as wasmtime's serialized form, `<cache_dir>/<digest>-<engine fingerprint>.cwasm`,
//! so a restarted agent does not compile again.
//!
//! A file on disk is native code that the agent maps and runs, so it is loaded only from
//! where nobody but the agent's user can write: the directory and the file must be owned
//! by that user and writable by no one else (checked at start-up for the directory, and
//! for both before every load). A file that fails the check, or fails to load, is
//! compiled anew and replaced, never executed. Shell jobs running as the agent's own user
//! could still write there; that is why a root runner runs them as another user (see
//! `runner::account`).

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use wasmtime::Engine;
use wasmtime::component::Component;

use crate::wasmtime_error::WasmtimeError;

/// Why the disk cache is not used for a file or its directory (logged; the component is
/// compiled again), or why a component did not compile.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cannot create it: {0}")]
    CreateDir(#[source] std::io::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("a symbolic link")]
    Symlink,
    #[error("owned by uid {owner}, not this agent's {me}")]
    NotOurs { owner: u32, me: u32 },
    #[error("writable by others (mode {mode:o})")]
    WritableByOthers { mode: u32 },
    #[error("not a precompiled component")]
    NotPrecompiled,
    #[error("no directory")]
    NoDirectory,
    #[error(transparent)]
    Wasmtime(#[from] WasmtimeError),
    #[error(transparent)]
    Persist(#[from] tempfile::PersistError),
}

/// Components by digest: in memory as `T` (what the host makes of a compiled component,
/// linked), on disk compiled.
pub struct ComponentCache<T> {
    dir: Option<PathBuf>,
    fingerprint: String,
    capacity: usize,
    /// Most recently used last.
    memory: Mutex<VecDeque<(String, T)>>,
}

impl<T: Clone> ComponentCache<T> {
    pub fn new(engine: &Engine, dir: Option<PathBuf>, capacity: usize) -> Self {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let dir = dir.filter(|dir| match private_dir(dir) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("compiled components stay in memory only: {}: {e}", dir.display());
                false
            }
        });
        Self {
            dir,
            fingerprint: format!("{:016x}", hasher.finish()),
            capacity: capacity.max(1),
            memory: Mutex::new(VecDeque::new()),
        }
    }

    /// What `digest` became, if in memory.
    pub fn get(&self, digest: &str) -> Option<T> {
        let mut memory = self.memory.lock().ok()?;
        let i = memory.iter().position(|(d, _)| d == digest)?;
        let entry = memory.remove(i)?;
        let kept = entry.1.clone();
        memory.push_back(entry);
        Some(kept)
    }

    /// Keeps what `digest` became, the least recently used going when full.
    pub fn remember(&self, digest: &str, kept: &T) {
        if let Ok(mut memory) = self.memory.lock() {
            memory.retain(|(d, _)| d != digest);
            if memory.len() >= self.capacity {
                memory.pop_front();
            }
            memory.push_back((digest.to_string(), kept.clone()));
        }
    }

    fn file(&self, digest: &str) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join(format!("{digest}-{}.cwasm", self.fingerprint)))
    }

    /// `digest` compiled earlier by an engine like this one, from disk (blocking).
    pub fn load_from_disk(&self, engine: &Engine, digest: &str) -> Option<Component> {
        let path = self.file(digest).filter(|p| p.exists())?;
        match owned_by_us(&path).and_then(|()| load_own_file(engine, &path)) {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!("compiled cache {} unusable, compiling again: {e}", path.display());
                None
            }
        }
    }

    /// Compiles `bytes` (blocking: call it off the async threads) and keeps the result on disk.
    pub fn compile(&self, engine: &Engine, digest: &str, bytes: &[u8]) -> Result<Component, WasmtimeError> {
        let started = std::time::Instant::now();
        let component = Component::new(engine, bytes)?;
        tracing::info!("compiled plugin {digest} ({} bytes) in {:?}", bytes.len(), started.elapsed());
        if let Some(path) = self.file(digest)
            && let Err(e) = write_file(&component, &path)
        {
            tracing::warn!("cannot keep compiled {digest} in {}: {e}", path.display());
        }
        Ok(component)
    }
}

/// Creates `dir` (0700) if missing; Err unless it is ours and no one else may write it.
fn private_dir(dir: &Path) -> Result<(), CacheError> {
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(CacheError::CreateDir)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    owned_by_us(dir)
}

/// Err unless `path` (not a symlink) belongs to this process's user and is writable by
/// its owner only.
fn owned_by_us(path: &Path) -> Result<(), CacheError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path)?;
    let me = nix::unistd::geteuid().as_raw();
    if meta.file_type().is_symlink() {
        return Err(CacheError::Symlink);
    }
    if meta.uid() != me {
        return Err(CacheError::NotOurs { owner: meta.uid(), me });
    }
    if meta.mode() & 0o022 != 0 {
        return Err(CacheError::WritableByOthers { mode: meta.mode() & 0o777 });
    }
    Ok(())
}

/// Deserializes a compiled component that this cache wrote.
///
/// Sound because the file is our own output: `write_file` writes `Component::serialize`
/// of a component compiled by an engine with the same compatibility fingerprint (part of
/// the file name), via a temporary file (0600) and an atomic rename into a directory
/// only the agent's user may write, and `owned_by_us` checked the file and directory
/// before this call. wasmtime checks the header, version and engine settings again and
/// refuses a mismatch. What it cannot check is that the machine code was not altered by
/// the agent's own user, who can already run code as the agent.
#[allow(unsafe_code)]
fn load_own_file(engine: &Engine, path: &Path) -> Result<Component, CacheError> {
    if !matches!(Engine::detect_precompiled_file(path), Ok(Some(wasmtime::Precompiled::Component))) {
        return Err(CacheError::NotPrecompiled);
    }
    // SAFETY: see the function's documentation: the file is one we wrote ourselves for
    // an engine of the same fingerprint.
    unsafe { Component::deserialize_file(engine, path) }.map_err(|e| CacheError::Wasmtime(e.into()))
}

fn write_file(component: &Component, path: &Path) -> Result<(), CacheError> {
    let dir = path.parent().ok_or(CacheError::NoDirectory)?;
    private_dir(dir)?;
    let bytes = component.serialize().map_err(WasmtimeError::from)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, &bytes)?;
    tmp.persist(path)?;
    Ok(())
}

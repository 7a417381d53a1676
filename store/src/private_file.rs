//! Files only their owner may read: identity seeds, `auth.conf`, the dashboard's token, a
//! run's input. Written whole (a temporary file renamed over the old one), never seen
//! half-written or readable by others.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{Error, ErrorKind};

/// Writes `text` to a new file readable by its owner only (replacing any file there).
pub fn write(path: &Path, text: &str) -> Result<(), Error> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(format!("creating {}", tmp.display())))?;
    file.write_all(text.as_bytes()).and_then(|()| file.sync_all()).map_err(io(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io(format!("writing {}", path.display())))
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::new(ErrorKind::Other, format!("{what}: {e}"))
}

//! The example Wasm plugins, each kind built once per test binary by its build script.

use std::path::PathBuf;
use std::sync::OnceLock;

/// Runs `script` (relative to the repository) once per test binary and returns the folder
/// of the components it prints, one path per line.
fn built_by(script: &str, dir: &'static OnceLock<PathBuf>) -> &'static PathBuf {
    dir.get_or_init(|| {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(script);
        let out = std::process::Command::new("bash").arg(&script).output().unwrap();
        assert!(out.status.success(), "{} failed: {}", script.display(), String::from_utf8_lossy(&out.stderr));
        let first = String::from_utf8(out.stdout).unwrap().lines().next().map(PathBuf::from).unwrap();
        first.parent().unwrap().to_path_buf()
    })
}

/// Builds every Rust plugin once per test binary (plugins/build.sh); returns their folder.
pub fn plugins() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    built_by("plugins/build.sh", &DIR)
}

/// The Python example job (`plugins/python/NAME/app.py`), built by
/// `plugins/python/build.sh` with componentize-py: a component without a manifest.
pub fn python_plugin(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    built_by("plugins/python/build.sh", &DIR).join(format!("{name}.wasm"))
}

/// The JavaScript example job (`plugins/js/NAME/app.js`), built by `plugins/js/build.sh`
/// with componentize-js: a component without a manifest.
pub fn js_plugin(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    built_by("plugins/js/build.sh", &DIR).join(format!("{name}.wasm"))
}

/// A built example plugin.
pub fn plugin(name: &str) -> PathBuf {
    plugins().join(format!("{name}.wasm"))
}

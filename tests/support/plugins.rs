//! The example Wasm plugins, built once per test binary by `plugins/build.sh`.

use std::path::PathBuf;

/// Builds every plugin once per test binary (plugins/build.sh); returns their folder.
pub fn plugins() -> &'static PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/build.sh");
        let out = std::process::Command::new("bash").arg(script).output().unwrap();
        assert!(out.status.success(), "plugins/build.sh failed: {}", String::from_utf8_lossy(&out.stderr));
        let first = String::from_utf8(out.stdout).unwrap().lines().next().map(PathBuf::from).unwrap();
        first.parent().unwrap().to_path_buf()
    })
}

/// The Python example job (`plugins/python/NAME/app.py`), built once per test binary by
/// `plugins/python/build.sh` with componentize-py: a component without a manifest.
pub fn python_plugin(name: &str) -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/python/build.sh");
        let out = std::process::Command::new("bash").arg(script).output().unwrap();
        assert!(out.status.success(), "plugins/python/build.sh failed: {}", String::from_utf8_lossy(&out.stderr));
        let first = String::from_utf8(out.stdout).unwrap().lines().next().map(PathBuf::from).unwrap();
        first.parent().unwrap().to_path_buf()
    });
    dir.join(format!("{name}.wasm"))
}

/// A built example plugin.
pub fn plugin(name: &str) -> PathBuf {
    plugins().join(format!("{name}.wasm"))
}

//! The binaries a benchmark spawns. Its agents and CLI calls must be the `cronrun` users
//! deploy, not this binary: that is the one `cargo build -p cronrun -p cronrun-bench` puts
//! beside `cronrun-bench`, so it is looked for there. A measurement that needs a fresh
//! process of its own (a load probe, an index reader) runs `cronrun-bench` itself.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The command that builds both binaries side by side.
const BUILD_BOTH: &str = "cargo build --release -p cronrun -p cronrun-bench";

/// The `cronrun` binary beside this one: what the benchmarks run as agents and CLI.
pub(crate) fn cronrun() -> Result<PathBuf> {
    beside(&this_binary()?, "cronrun")
}

/// This binary, `cronrun-bench`, for a measurement in a fresh process of its own.
pub(crate) fn this_binary() -> Result<PathBuf> {
    std::env::current_exe().context("finding the cronrun-bench binary")
}

/// The binary `name` in the directory of `exe`, or an error saying where it was looked
/// for and how to build it.
fn beside(exe: &Path, name: &str) -> Result<PathBuf> {
    let path = exe.with_file_name(name);
    if !path.is_file() {
        bail!(
            "the {name} binary the benchmarks run is not at {} (beside {}): build both with `{BUILD_BOTH}`",
            path.display(),
            exe.display()
        );
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::beside;

    #[test]
    fn cronrun_is_found_beside_the_bench_binary_or_the_error_says_where_and_how_to_build_it() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("cronrun-bench");
        let e = beside(&exe, "cronrun").unwrap_err().to_string();
        let looked = dir.path().join("cronrun");
        assert!(e.contains(&format!("not at {}", looked.display())), "{e}");
        assert!(e.contains("cargo build --release -p cronrun -p cronrun-bench"), "{e}");
        std::fs::write(&looked, "").unwrap();
        assert_eq!(beside(&exe, "cronrun").unwrap(), looked);
    }
}

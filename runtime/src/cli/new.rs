//! `cronrun new NAME [--lang rust|python|js]`: a job project that builds anywhere, like
//! `spin new`. Rust: a crate on the SDK (`cronrun-sdk = "0.1"`, or `--sdk-path` to a
//! checkout's `sdk/`) whose `#[job]` attribute carries the schedule. Python and JavaScript:
//! `app.py` or `app.js`, the job world's WIT (this binary's own copy of `wit/job.wit`) and
//! a `build.sh` running componentize-py or componentize-js (pinned as `plugins/js` pins it)
//! and `cronrun manifest`. Nothing is written into a directory that exists.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};

use super::Ctx;

#[derive(Clone, Copy, ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
}

#[derive(Args)]
pub struct NewArgs {
    /// The job's name (also the crate's): a letter, then A-Z a-z 0-9 _ -
    pub name: String,
    #[arg(long, value_enum, default_value = "rust")]
    pub lang: Lang,
    /// The directory to create [default: ./NAME]
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The schedule the job carries
    #[arg(long, default_value = "0 * * * * *")]
    pub schedule: String,
    /// Depend on the SDK in this directory (a checkout's sdk/) instead of crates.io
    #[arg(long, value_name = "DIR")]
    pub sdk_path: Option<PathBuf>,
}

const JOB_WIT: &str = include_str!("../../../wit/job.wit");
/// componentize-js as `plugins/js` pins it: the same versions, the same dependency tree.
/// preview2-shim is one componentize-js 0.23.0 imports without depending on it.
const JS_PACKAGE: &str = r#"{
  "name": "cronrun-job",
  "private": true,
  "devDependencies": {
    "@bytecodealliance/componentize-js": "0.23.0",
    "@bytecodealliance/preview2-shim": "0.25.0"
  }
}
"#;
const JS_LOCK: &str = include_str!("../../../plugins/js/package-lock.json");

pub fn run(ctx: &Ctx, a: NewArgs) -> Result<()> {
    crate::names::validate_job_name(&a.name)?;
    if !a.name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        bail!("{:?}: a project's name must start with a letter (it names the crate too)", a.name);
    }
    crate::schedule::Schedule::parse(&a.schedule).map_err(|e| anyhow::anyhow!("--schedule: {e}"))?;
    if a.schedule.contains(|c: char| c.is_control() || matches!(c, '"' | '\'' | '\\')) {
        bail!("--schedule {:?}: quotes, backslashes and control characters are no part of a schedule", a.schedule);
    }
    let dir = a.dir.clone().unwrap_or_else(|| PathBuf::from(&a.name));
    if dir.exists() {
        bail!("{} exists: give a new directory with --dir, or remove it", dir.display());
    }
    let sdk = match &a.sdk_path {
        Some(path) => {
            let path = path.canonicalize().with_context(|| format!("--sdk-path {}", path.display()))?;
            if !path.join("Cargo.toml").is_file() {
                bail!("--sdk-path {}: no Cargo.toml there; give a checkout's sdk/ directory", path.display());
            }
            format!("{{ path = {:?} }}", path.display().to_string())
        }
        None => "\"0.1\"".to_string(),
    };
    // cargo names a crate's output with `_` for `-`; the job keeps the name given.
    let file = a.name.replace('-', "_");
    let fill = |template: &str| {
        template
            .replace("{{name}}", &a.name)
            .replace("{{file}}", &file)
            .replace("{{schedule}}", &a.schedule)
            .replace("{{sdk}}", &sdk)
    };
    let files: Vec<(&str, String)> = match a.lang {
        Lang::Rust => vec![
            ("Cargo.toml", fill(include_str!("templates/rust_cargo.toml.txt"))),
            (".cargo/config.toml", "[build]\ntarget = \"wasm32-wasip2\"\n".into()),
            ("src/lib.rs", fill(include_str!("templates/rust_lib.rs.txt"))),
            ("README.md", fill(include_str!("templates/rust_readme.md.txt"))),
            (".gitignore", "/target\n".into()),
        ],
        Lang::Python => vec![
            ("app.py", fill(include_str!("templates/python_app.py.txt"))),
            ("build.sh", fill(include_str!("templates/python_build.sh.txt"))),
            ("wit/job.wit", JOB_WIT.into()),
            ("README.md", fill(include_str!("templates/python_readme.md.txt"))),
            (".gitignore", "*.wasm\n*.wasm.tmp\n__pycache__/\n".into()),
        ],
        Lang::Js => vec![
            ("app.js", fill(include_str!("templates/js_app.js.txt"))),
            ("package.json", JS_PACKAGE.into()),
            ("package-lock.json", JS_LOCK.replace("\"name\": \"cronrun-js-jobs\"", "\"name\": \"cronrun-job\"")),
            ("build.sh", fill(include_str!("templates/js_build.sh.txt"))),
            ("wit/job.wit", JOB_WIT.into()),
            ("README.md", fill(include_str!("templates/js_readme.md.txt"))),
            (".gitignore", "*.wasm\n*.wasm.tmp\nnode_modules/\n".into()),
        ],
    };
    write_project(&dir, &files)?;
    let next = match a.lang {
        Lang::Rust => format!(
            "cd {} && cargo build --release && cronrun deploy target/wasm32-wasip2/release/{file}.wasm --name {}",
            dir.display(),
            a.name
        ),
        Lang::Python | Lang::Js => format!("cd {} && ./build.sh && cronrun deploy {}.wasm", dir.display(), a.name),
    };
    let value = serde_json::json!({ "name": a.name, "dir": dir, "next": next });
    ctx.print(&value, || format!("created {} in {}\nnext: {next}", a.name, dir.display()))
}

/// Writes the project into a temporary directory beside `dir`, then renames it into
/// place: a failure leaves nothing behind.
fn write_project(dir: &Path, files: &[(&str, String)]) -> Result<()> {
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let staging = tempfile::Builder::new()
        .prefix(".cronrun-new-")
        .tempdir_in(parent)
        .with_context(|| format!("cannot write in {}", parent.display()))?;
    for (path, text) in files {
        let target = staging.path().join(path);
        if let Some(folder) = target.parent() {
            std::fs::create_dir_all(folder)?;
        }
        std::fs::write(&target, text).with_context(|| format!("writing {path}"))?;
        if path.ends_with(".sh") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    // Moved away, the staging directory is no longer there for its drop to remove.
    std::fs::rename(staging.path(), dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_js_project_pins_what_the_js_example_pins() {
        let ours: serde_json::Value = serde_json::from_str(JS_PACKAGE).unwrap();
        let example: serde_json::Value =
            serde_json::from_str(include_str!("../../../plugins/js/package.json")).unwrap();
        assert_eq!(ours["devDependencies"], example["devDependencies"]);
        let lock: serde_json::Value = serde_json::from_str(JS_LOCK).unwrap();
        assert_eq!(lock["packages"][""]["devDependencies"], example["devDependencies"], "the lock is the example's");
    }
}

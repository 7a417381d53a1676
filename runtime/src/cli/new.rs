//! `cronrun new NAME [--lang rust|python|js]`: a job project that builds anywhere, like
//! `spin new`. Rust: a crate on the SDK this binary ships (written into the project's
//! `.cronrun/sdk/`, see `new/sdk.rs`; or `--sdk-path` to a checkout's `sdk/`) with a lock
//! file of the SDK's tested versions, whose `#[job]` attribute carries the schedule. Python
//! and JavaScript: `app.py` or `app.js`, the job world's WIT (this binary's own copy of
//! `wit/job.wit`) and a `build.sh` running componentize-py or componentize-js (pinned as
//! `plugins/js` pins it) and `cronrun manifest`. Nothing is written into a directory that
//! exists. The printed next step runs as printed: it names this binary by its absolute path
//! when `cronrun` on PATH is another one (or none), quoted for `sh`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};

use super::Ctx;

mod sdk;

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
    /// Depend on the SDK in this directory (a checkout's sdk/) instead of the copy this
    /// binary ships (written into the project's .cronrun/sdk)
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
    crate::schedule::Schedule::parse_for(&a.schedule, &a.name).map_err(|e| anyhow::anyhow!("--schedule: {e}"))?;
    if a.schedule.contains(|c: char| c.is_control() || matches!(c, '"' | '\'' | '\\')) {
        bail!("--schedule {:?}: quotes, backslashes and control characters are no part of a schedule", a.schedule);
    }
    if sdk::uses_crate(&a.name) {
        bail!("{:?} names a crate the SDK depends on: give the project another name", a.name);
    }
    let dir = a.dir.clone().unwrap_or_else(|| PathBuf::from(&a.name));
    if dir.exists() {
        bail!("{} exists: give a new directory with --dir, or remove it", dir.display());
    }
    let wit = sdk::wit_package(JOB_WIT).unwrap_or("cronrun:job");
    let sdk = match &a.sdk_path {
        Some(path) => {
            let path = path.canonicalize().with_context(|| format!("--sdk-path {}", path.display()))?;
            if !path.join("Cargo.toml").is_file() {
                bail!("--sdk-path {}: no Cargo.toml there; give a checkout's sdk/ directory", path.display());
            }
            format!(
                "# The SDK of the checkout given to `cronrun new --sdk-path`.\ncronrun-sdk = {{ path = {} }}",
                toml_string(&path.display().to_string())
            )
        }
        None => format!(
            "# cronrun-sdk {version} as this cronrun ships it (`cronrun new` wrote it into {dir}/),\n\
             # built against the job world {wit}: runners speaking {wit} run it. Once\n\
             # the crate is on crates.io, this line instead: cronrun-sdk = \"{major}\"\n\
             cronrun-sdk = {{ path = \"{dir}/cronrun-sdk\" }}",
            version = sdk::SDK_VERSION,
            dir = sdk::DIR,
            major = sdk::SDK_VERSION.rsplit_once('.').map_or(sdk::SDK_VERSION, |(major, _)| major),
        ),
    };
    let cronrun = this_cronrun();
    let cronrun_sh = cronrun.as_deref().map(|p| sh_quote(&p.to_string_lossy())).unwrap_or_else(|| "''".into());
    // cargo names a crate's output with `_` for `-`; the job keeps the name given.
    let file = a.name.replace('-', "_");
    let fill = |template: &str| {
        template
            .replace("{{name}}", &a.name)
            .replace("{{file}}", &file)
            .replace("{{schedule}}", &a.schedule)
            .replace("{{sdk}}", &sdk)
            .replace("{{wit}}", wit)
            .replace("{{sdk_version}}", sdk::SDK_VERSION)
            .replace("{{made_by}}", &cronrun_sh)
    };
    let mut files: Vec<(String, String)> = match a.lang {
        Lang::Rust => vec![
            ("Cargo.toml".into(), fill(include_str!("templates/rust_cargo.toml.txt"))),
            ("Cargo.lock".into(), sdk::lock(&a.name)),
            (".cargo/config.toml".into(), "[build]\ntarget = \"wasm32-wasip2\"\n".into()),
            ("src/lib.rs".into(), fill(include_str!("templates/rust_lib.rs.txt"))),
            ("README.md".into(), fill(include_str!("templates/rust_readme.md.txt"))),
            (".gitignore".into(), "/target\n".into()),
        ],
        Lang::Python => vec![
            ("app.py".into(), fill(include_str!("templates/python_app.py.txt"))),
            ("build.sh".into(), fill(include_str!("templates/python_build.sh.txt"))),
            ("wit/job.wit".into(), JOB_WIT.into()),
            ("README.md".into(), fill(include_str!("templates/python_readme.md.txt"))),
            (".gitignore".into(), "*.wasm\n*.wasm.tmp\n__pycache__/\n".into()),
        ],
        Lang::Js => vec![
            ("app.js".into(), fill(include_str!("templates/js_app.js.txt"))),
            ("package.json".into(), JS_PACKAGE.into()),
            ("package-lock.json".into(), JS_LOCK.replace("\"name\": \"cronrun-js-jobs\"", "\"name\": \"cronrun-job\"")),
            ("build.sh".into(), fill(include_str!("templates/js_build.sh.txt"))),
            ("wit/job.wit".into(), JOB_WIT.into()),
            ("README.md".into(), fill(include_str!("templates/js_readme.md.txt"))),
            (".gitignore".into(), "*.wasm\n*.wasm.tmp\nnode_modules/\n".into()),
        ],
    };
    if matches!(a.lang, Lang::Rust) && a.sdk_path.is_none() {
        files.push((format!("{}/README.md", sdk::DIR), fill(include_str!("templates/sdk_readme.md.txt"))));
        files.extend(sdk::FILES.iter().map(|(path, text)| (format!("{}/{path}", sdk::DIR), text.to_string())));
    }
    write_project(&dir, &files)?;
    // `cd -x` would be an option of cd.
    let cd = if dir.to_string_lossy().starts_with('-') { Path::new(".").join(&dir) } else { dir.clone() };
    let cd = sh_quote(&cd.to_string_lossy());
    let run = cronrun.as_deref().map(|p| sh_quote(&p.to_string_lossy())).unwrap_or_else(|| "cronrun".into());
    let next = match a.lang {
        Lang::Rust => format!(
            "cd {cd} && cargo build --release && {run} deploy target/wasm32-wasip2/release/{file}.wasm --name {}",
            a.name
        ),
        Lang::Python | Lang::Js => format!("cd {cd} && ./build.sh && {run} deploy {}.wasm", a.name),
    };
    let needs = match a.lang {
        Lang::Rust => "rustup target add wasm32-wasip2",
        Lang::Python => "pip install componentize-py",
        Lang::Js => "node and npm (build.sh installs componentize-js)",
    };
    let value = serde_json::json!({ "name": a.name, "dir": dir, "next": next, "needs": needs, "wit": wit });
    ctx.print(&value, || {
        format!("created {} in {} (job world {wit})\nonce: {needs}\nnext: {next}", a.name, dir.display())
    })
}

/// This binary's absolute path when `cronrun` on PATH is not this binary (or there is
/// none): a command printed for the user must then name it in full. None when the name
/// alone finds it, or when the binary cannot say where it is.
fn this_cronrun() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let exe = exe.canonicalize().unwrap_or(exe);
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path).map(|dir| dir.join("cronrun")).find(|candidate| is_executable(candidate))
    });
    match on_path.and_then(|found| found.canonicalize().ok()) {
        Some(found) if found == exe => None,
        _ => Some(exe),
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `text` as one word for `sh` (and bash): as it is when nothing in it is special, else in
/// single quotes.
fn sh_quote(text: &str) -> String {
    let plain =
        |c: char| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | ',' | ':' | '@' | '%' | '=');
    if !text.is_empty() && text.chars().all(plain) {
        return text.to_string();
    }
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}

/// Writes the project into a temporary directory beside `dir`, then renames it into
/// place: a failure leaves nothing behind.
fn write_project(dir: &Path, files: &[(String, String)]) -> Result<()> {
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
        std::fs::write(&target, text).with_context(|| format!("writing {path} in {}", staging.path().display()))?;
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
    fn a_word_for_sh_is_quoted_only_when_it_must_be() {
        assert_eq!(sh_quote("/usr/local/bin/cronrun"), "/usr/local/bin/cronrun");
        assert_eq!(sh_quote("my jobs"), "'my jobs'");
        assert_eq!(sh_quote("it's"), "'it'\\''s'");
        assert_eq!(sh_quote("$HOME`x`"), "'$HOME`x`'");
        assert_eq!(sh_quote(""), "''");
    }

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

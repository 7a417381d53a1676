//! `cronrun new` as a user runs it: each kind of project (Rust, Python, JavaScript) is made
//! in a directory outside the repository whose path holds a space and a quote, by a
//! cronrun binary that is not on PATH and sits in such a directory too, then built and
//! deployed by running the printed next step through `sh -c` in a user's environment
//! (HOME and PATH; no CARGO_* variables, no `[patch]`, no repository path), and seen
//! running on a real agent by its own schedule. Also: a component built for a job world the
//! runner does not implement is refused at deploy with one line, and every example of
//! docs/sdk.md builds in a project made by `new`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::*;
use cronrun::record::{Status, Trigger};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap()
}

/// A command with the environment a user has in a terminal: HOME, PATH (without the
/// repository and without any `cronrun`), what the machine sets for everyone, and the
/// server to talk to. Nothing of the test harness (CARGO_*, RUSTFLAGS, RUSTUP_TOOLCHAIN...).
fn as_user(program: impl AsRef<std::ffi::OsStr>, nats: &Nats) -> Command {
    let repo = repo();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(
        std::env::split_paths(&path).filter(|dir| !dir.starts_with(&repo) && !dir.join("cronrun").exists()),
    )
    .unwrap();
    let mut command = Command::new(program);
    command.env_clear().env("PATH", path);
    // What the machine sets for everyone (locale, where rustup and pyenv live, how TLS and
    // proxies are reached: npm needs the CA of an intercepting proxy) stays.
    for kept in [
        "HOME",
        "USER",
        "LANG",
        "LC_ALL",
        "TERM",
        "RUSTUP_HOME",
        "PYENV_ROOT",
        "NODE_EXTRA_CA_CERTS",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
    ] {
        if let Some(value) = std::env::var_os(kept) {
            command.env(kept, value);
        }
    }
    command.env("CRONRUN_NATS", &nats.url).env("CRONRUN_CREDS", nats.identity("admin"));
    command
}

fn succeeded(what: &str, out: Output) -> String {
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed ({}):\n{stdout}\n{stderr}", out.status);
    stdout.into_owned()
}

/// The cronrun binary as a user may have it: at a path with a space, not on PATH. A hard
/// link (a copy across file systems), so that `current_exe` is that path.
fn installed_cronrun(dir: &Path) -> PathBuf {
    let tools = dir.join("my tools");
    std::fs::create_dir_all(&tools).unwrap();
    let bin = tools.join("cronrun");
    if std::fs::hard_link(BIN, &bin).is_err() {
        std::fs::copy(BIN, &bin).unwrap();
    }
    bin
}

/// `cronrun new ARGS` run as a user in `cwd`; returns the printed next step.
fn new_project(cronrun: &Path, cwd: &Path, nats: &Nats, args: &[&str]) -> String {
    let out = as_user(cronrun, nats).current_dir(cwd).arg("new").args(args).output().unwrap();
    let said = succeeded(&format!("cronrun new {args:?}"), out);
    said.lines()
        .find_map(|l| l.strip_prefix("next: "))
        .unwrap_or_else(|| panic!("no next step in:\n{said}"))
        .to_string()
}

/// Runs the printed next step as printed, through `sh -c`, in `cwd` as a user.
fn run_next_step(next: &str, cwd: &Path, nats: &Nats) -> String {
    succeeded(&format!("sh -c {next:?}"), as_user("sh", nats).current_dir(cwd).arg("-c").arg(next).output().unwrap())
}

fn shell_word(path: &Path) -> String {
    format!("'{}'", path.to_str().unwrap().replace('\'', "'\\''"))
}

#[tokio::test(flavor = "multi_thread")]
async fn projects_made_by_new_build_and_deploy_as_printed_outside_the_repository_and_run_by_their_schedule() {
    let nats = Nats::start().await;
    assert!(!nats.dir.path().starts_with(repo()), "the test directory is outside the repository");
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let store = nats.store().await;
    let cronrun = installed_cronrun(nats.dir.path());
    let home = nats.dir.path().join("it's my jobs");
    std::fs::create_dir_all(&home).unwrap();

    // Rust: the SDK this cronrun ships, written into the project and named by path; the
    // printed step names this cronrun by its absolute path, quoted, as it is not on PATH.
    let next = new_project(&cronrun, &home, &nats, &["greet-er", "--schedule", "*/2 * * * * *"]);
    assert_eq!(
        next,
        format!(
            "cd greet-er && cargo build --release && {} deploy target/wasm32-wasip2/release/greet_er.wasm --name greet-er",
            shell_word(&cronrun)
        )
    );
    let project = home.join("greet-er");
    let manifest = std::fs::read_to_string(project.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("cronrun-sdk = { path = \".cronrun/sdk/cronrun-sdk\" }"), "{manifest}");
    assert!(manifest.contains("# the crate is on crates.io, this line instead: cronrun-sdk = \"0.1\""), "{manifest}");
    assert!(manifest.contains("cronrun:job@0.1.0"), "the job world is recorded: {manifest}");
    for written in walk(&project.join(".cronrun")).iter().filter(|p| p.ends_with("Cargo.toml")) {
        let text = std::fs::read_to_string(written).unwrap();
        for line in text.lines().filter(|l| l.starts_with("path")) {
            assert!(line.starts_with("path = \"../cronrun-"), "{}: {line}", written.display());
        }
        assert!(!text.contains("workspace"), "{}: stand-alone:\n{text}", written.display());
    }
    let lock = std::fs::read_to_string(project.join("Cargo.lock")).unwrap();
    run_next_step(&next, &home, &nats);
    assert!(project.join("target/wasm32-wasip2/release/greet_er.wasm").is_file(), "built in the project's target/");
    let sdk_lock = std::fs::read_to_string(repo().join("sdk/Cargo.lock")).unwrap();
    let version = |lock: &str, name: &str| {
        let at = lock.find(&format!("name = \"{name}\"\nversion = ")).unwrap_or_else(|| panic!("{name} in lock"));
        lock[at..].lines().nth(1).unwrap().to_string()
    };
    let built_lock = std::fs::read_to_string(project.join("Cargo.lock")).unwrap();
    for name in ["wit-bindgen", "wasip2", "syn", "chrono", "chrono-tz"] {
        assert_eq!(version(&built_lock, name), version(&sdk_lock, name), "{name}: the SDK's tested version is built");
        assert_eq!(version(&lock, name), version(&sdk_lock, name), "{name}: as written");
    }
    let done = eventually(Duration::from_secs(30), "two scheduled runs of greet-er", || async {
        let ok: Vec<_> = runs(&store, "greet-er")
            .await
            .into_iter()
            .filter(|r| r.status == Status::Succeeded && r.trigger == Trigger::Schedule)
            .collect();
        (ok.len() >= 2).then_some(ok)
    })
    .await;
    assert!(done[0].output.iter().any(|l| l.contains("hello from greet-er")), "{:?}", done[0].output);
    assert_eq!(done[0].output.last().map(String::as_str), Some("hello, world"));

    // Nothing is written over a directory that exists, or for a name that is no job's.
    let before = std::fs::read_to_string(project.join("src/lib.rs")).unwrap();
    let dir = project.to_str().unwrap();
    let err = nats.fails(&["new", "greet-er", "--dir", dir]);
    assert!(err.contains("exists"), "{err}");
    assert_eq!(std::fs::read_to_string(project.join("src/lib.rs")).unwrap(), before);
    for (name, needle) in [("orders.*", "must be 1 to 128"), ("9lives", "must start with a letter"), ("syn", "SDK")] {
        let err = nats.fails(&["new", name, "--dir", nats.dir.path().join("bad").to_str().unwrap()]);
        assert!(err.contains(needle), "{name}: {err}");
    }
    let err = nats.fails(&["new", "x", "--dir", nats.dir.path().join("x").to_str().unwrap(), "--schedule", "often"]);
    assert!(err.contains("--schedule"), "{err}");
    let err = nats.fails(&["new", "x", "--dir", nats.dir.path().join("x").to_str().unwrap(), "--schedule", "@daily\r"]);
    assert!(err.contains("control characters"), "{err}");
    let left: Vec<_> = std::fs::read_dir(nats.dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n == "bad" || n == "x" || n.starts_with(".cronrun-new-"))
        .collect();
    assert!(left.is_empty(), "nothing written for a refused project: {left:?}");

    // Python and JavaScript: the app and the job world's WIT, built by the project's
    // build.sh (componentize-py or componentize-js, then `cronrun manifest` by the cronrun
    // that made the project), run under the same sandbox by their own schedule, and with
    // an input when triggered. Python's `--dir` is relative, JavaScript's absolute.
    let js_dir = home.join("js job");
    for (lang, name, app, dir) in
        [("python", "py-job", "app.py", "py job".to_string()), ("js", "js-job", "app.js", js_dir.display().to_string())]
    {
        let next =
            new_project(&cronrun, &home, &nats, &[name, "--lang", lang, "--dir", &dir, "--schedule", "*/5 * * * * *"]);
        let project = home.join(&dir);
        assert_eq!(
            next,
            format!("cd {} && ./build.sh && {} deploy {name}.wasm", shell_word(Path::new(&dir)), shell_word(&cronrun))
        );
        assert!(project.join(app).is_file(), "{lang}: {app}");
        assert_eq!(
            std::fs::read_to_string(project.join("wit/job.wit")).unwrap(),
            std::fs::read_to_string(repo().join("wit/job.wit")).unwrap(),
            "the project carries the job world as this version has it"
        );
        run_next_step(&next, &home, &nats);
        assert!(nats.ok(&["get", name]).contains("*/5 * * * * *"), "{lang}: the schedule came from the component");
        let scheduled = eventually(Duration::from_secs(120), &format!("a scheduled run of {name}"), || async {
            runs(&store, name)
                .await
                .into_iter()
                .find(|r| r.status == Status::Succeeded && r.trigger == Trigger::Schedule)
        })
        .await;
        assert_eq!(scheduled.output.last().map(String::as_str), Some("hello, world"), "{lang}");
        let out =
            nats.ok(&["trigger", name, "--input", "{\"n\": 1}", "--wait", "--timeout", "120s", "--output", "json"]);
        let record: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(record["status"], "succeeded", "{lang}: {record}");
        let output: Vec<&str> = record["output"].as_array().unwrap().iter().filter_map(|l| l.as_str()).collect();
        assert!(output.iter().any(|l| l.contains(&format!("hello from {name}"))), "{lang}: {output:?}");
        assert!(output.iter().any(|l| l.contains("input: {\"n\":1}")), "{lang}: {output:?}");
        assert_eq!(output.last(), Some(&"hello, world"), "{lang}");
    }
    // build.sh without the binary that made the project: `cronrun` on PATH, else one line.
    let out = as_user("./build.sh", &nats).current_dir(home.join("py job")).env("CRONRUN", "no-such-cronrun").output();
    let out = out.unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-cronrun not found: put cronrun on PATH or set CRONRUN"), "{err}");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// Builds projects made by `new` in a target directory kept between test runs and shared by
/// the tests below, always `--release` so that the SDK's dependencies are built once (these
/// tests are about what is built, not about building as a user: the test above is).
fn build_in(project: &Path, nats: &Nats, args: &[&str]) -> Output {
    let target = repo().join("target/scaffold");
    as_user("cargo", nats).current_dir(project).env("CARGO_TARGET_DIR", target).args(args).output().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_project_built_for_another_job_world_is_refused_at_deploy_with_one_line() {
    let nats = Nats::start().await;
    let project = nats.dir.path().join("future-job");
    nats.ok(&["new", "future-job", "--dir", project.to_str().unwrap()]);
    // What a newer cronrun's `new` would write: the SDK generated from `cronrun:job@0.2.0`.
    let wit = project.join(".cronrun/sdk/cronrun-sdk/wit/job.wit");
    let text = std::fs::read_to_string(&wit).unwrap();
    assert!(text.contains("package cronrun:job@0.1.0;"), "the SDK is built from the world this cronrun speaks");
    std::fs::write(&wit, text.replace("package cronrun:job@0.1.0;", "package cronrun:job@0.2.0;")).unwrap();
    succeeded("cargo build", build_in(&project, &nats, &["build", "--release"]));
    let wasm = repo().join("target/scaffold/wasm32-wasip2/release/future_job.wasm");
    let err = nats.fails(&["deploy", wasm.to_str().unwrap()]);
    assert!(err.contains("is not a cronrun job"), "{err}");
    assert!(err.contains("cronrun:job/") && err.contains("@0.2.0"), "names the import it lacks: {err}");
    let out = nats.cli(&["get", "future-job"]);
    assert!(!out.status.success(), "nothing was stored");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_reference_examples_build_in_a_project_made_by_new() {
    let nats = Nats::start().await;
    let project = nats.dir.path().join("doc-example");
    nats.ok(&["new", "doc-example", "--dir", project.to_str().unwrap()]);
    let doc = std::fs::read_to_string(repo().join("docs/sdk.md")).unwrap();
    let examples: Vec<&str> = doc.split("```rust\n").skip(1).map(|rest| rest.split("\n```").next().unwrap()).collect();
    assert!(examples.len() >= 9, "one example per part of the API: {}", examples.len());
    let mut failed = Vec::new();
    for (i, example) in examples.iter().enumerate() {
        std::fs::write(project.join("src/lib.rs"), example).unwrap();
        // Built as the component's crate is: the #[job] expansion (its manifest
        // validated), the export and every call, for wasm32-wasip2.
        let out = build_in(&project, &nats, &["build", "--release", "--message-format", "short"]);
        if !out.status.success() {
            failed.push(format!("example {i}:\n{example}\n{}", String::from_utf8_lossy(&out.stderr)));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

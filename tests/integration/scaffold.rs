//! `cronrun new`: a job project made in a directory outside the repository builds, deploys
//! and runs, in Rust, Python and JavaScript; a bad name or a directory that exists writes
//! nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::*;
use cronrun::record::Status;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap()
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// The SDK as crates.io would serve it: `cargo package` of the SDK, its macros and the
/// crates they use, unpacked into `dir`. What is built from them is what publishing would
/// upload (manifests without paths, the WIT inside the crate), not this checkout.
fn packaged_sdk(dir: &Path) -> Vec<(String, PathBuf)> {
    let target = dir.join("package-target");
    // The SDK's macros need cronrun-model from the registry, where it is not yet: no lock
    // file can be made for them, and none is published for a library anyway.
    let workspaces: [(PathBuf, &[&str], &[&str]); 2] = [
        (repo(), &["cronrun-time", "cronrun-model"], &[]),
        (repo().join("sdk"), &["cronrun-sdk-macros", "cronrun-sdk"], &["--exclude-lockfile"]),
    ];
    let unpacked = dir.join("crates");
    std::fs::create_dir_all(&unpacked).unwrap();
    let mut crates = Vec::new();
    for (workspace, names, extra) in workspaces {
        let mut package = cargo();
        package.current_dir(&workspace).args(["package", "--no-verify", "--allow-dirty", "--target-dir"]);
        package.arg(&target).args(extra);
        for name in names {
            package.args(["-p", name]);
        }
        let out = package.output().unwrap();
        assert!(out.status.success(), "cargo package: {}", String::from_utf8_lossy(&out.stderr));
        for name in names {
            let file = std::fs::read_dir(target.join("package"))
                .unwrap()
                .filter_map(|e| e.ok().map(|e| e.path()))
                .find(|p| {
                    let file = p.file_name().unwrap().to_string_lossy().into_owned();
                    file.strip_prefix(&format!("{name}-")).is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
                        && file.ends_with(".crate")
                })
                .unwrap_or_else(|| panic!("{name} was not packaged"));
            let out = Command::new("tar").arg("-xzf").arg(&file).arg("-C").arg(&unpacked).output().unwrap();
            assert!(out.status.success(), "unpacking {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
            crates.push((name.to_string(), unpacked.join(file.file_stem().unwrap())));
        }
    }
    crates
}

/// Builds a Rust project made by `new` for wasm32-wasip2, the packaged SDK crates standing
/// in for the crates.io ones the project names (`[patch.crates-io]`), with the versions
/// and the target directory the example plugins use.
fn build_rust(project: &Path, sdk: &[(String, PathBuf)]) -> PathBuf {
    std::fs::copy(repo().join("plugins/Cargo.lock"), project.join("Cargo.lock")).unwrap();
    let target = repo().join("target");
    let mut build = cargo();
    build.current_dir(project).env("CARGO_TARGET_DIR", &target).args(["build", "--release"]);
    for (name, path) in sdk {
        build.arg("--config").arg(format!("patch.crates-io.{name}.path={:?}", path.display()));
    }
    let out = build.output().unwrap();
    assert!(out.status.success(), "cargo build: {}", String::from_utf8_lossy(&out.stderr));
    // cargo writes `-` in a crate's name as `_`.
    target.join("wasm32-wasip2/release/greet_er.wasm")
}

#[tokio::test(flavor = "multi_thread")]
async fn projects_made_by_new_outside_the_repository_build_deploy_and_run() {
    let nats = Nats::start().await;
    assert!(!nats.dir.path().starts_with(repo()), "the test directory is outside the repository");
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let store = nats.store().await;

    // Rust, on the SDK crate as it would be published, with the schedule it was made
    // with; deployed as `new` says.
    let project = nats.dir.path().join("greet-er");
    let dir = project.to_str().unwrap();
    let said = nats.ok(&["new", "greet-er", "--dir", dir, "--schedule", "*/2 * * * * *"]);
    assert!(said.contains("cargo build --release"), "{said}");
    assert!(said.contains("greet_er.wasm --name greet-er"), "{said}");
    let manifest = std::fs::read_to_string(project.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("cronrun-sdk = \"0.1\""), "{manifest}");
    let wasm = build_rust(&project, &packaged_sdk(nats.dir.path()));
    nats.ok(&["deploy", wasm.to_str().unwrap(), "--name", "greet-er"]);
    let done = eventually(Duration::from_secs(30), "two scheduled runs of greet-er", || async {
        let ok: Vec<_> = runs(&store, "greet-er").await.into_iter().filter(|r| r.status == Status::Succeeded).collect();
        (ok.len() >= 2).then_some(ok)
    })
    .await;
    assert!(done[0].output.iter().any(|l| l.contains("hello from greet-er")), "{:?}", done[0].output);
    assert_eq!(done[0].output.last().map(String::as_str), Some("hello, world"));

    // Nothing is written over a directory that exists, or for a name that is no job's.
    let before = std::fs::read_to_string(project.join("src/lib.rs")).unwrap();
    let err = nats.fails(&["new", "greet-er", "--dir", dir]);
    assert!(err.contains("exists"), "{err}");
    assert_eq!(std::fs::read_to_string(project.join("src/lib.rs")).unwrap(), before);
    for (name, needle) in [("orders.*", "must be 1 to 128"), ("9lives", "must start with a letter")] {
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
    // build.sh (componentize-py or componentize-js, then `cronrun manifest` for the
    // schedule), run under the same sandbox.
    for (lang, name, app) in [("python", "py-job", "app.py"), ("js", "js-job", "app.js")] {
        let project = nats.dir.path().join(name);
        nats.ok(&["new", name, "--lang", lang, "--dir", project.to_str().unwrap(), "--schedule", "@yearly"]);
        assert!(project.join(app).is_file(), "{lang}: {app}");
        assert_eq!(
            std::fs::read_to_string(project.join("wit/job.wit")).unwrap(),
            std::fs::read_to_string(repo().join("wit/job.wit")).unwrap(),
            "the project carries the job world as this version has it"
        );
        let out = Command::new(project.join("build.sh")).env("CRONRUN", BIN).output().unwrap();
        assert!(out.status.success(), "{lang} build.sh: {}", String::from_utf8_lossy(&out.stderr));
        nats.ok(&["deploy", project.join(format!("{name}.wasm")).to_str().unwrap()]);
        assert!(nats.ok(&["get", name]).contains("@yearly"), "{lang}: the schedule came from the component");
        let out =
            nats.ok(&["trigger", name, "--input", "{\"n\": 1}", "--wait", "--timeout", "120s", "--output", "json"]);
        let record: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(record["status"], "succeeded", "{lang}: {record}");
        let output: Vec<&str> = record["output"].as_array().unwrap().iter().filter_map(|l| l.as_str()).collect();
        assert!(output.iter().any(|l| l.contains(&format!("hello from {name}"))), "{lang}: {output:?}");
        assert!(output.iter().any(|l| l.contains("input: {\"n\":1}")), "{lang}: {output:?}");
        assert_eq!(output.last(), Some(&"hello, world"), "{lang}");
    }
}

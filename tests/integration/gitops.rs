//! Jobs kept in files under version control: `diff -f` says what `apply -f` would do and
//! exits as diff(1) does; `apply --owner --prune` removes only the jobs of its owner that
//! the file no longer names; `--dry-run` and `diff` write nothing; `export` gives a file
//! that `apply` and `diff` find identical to the store. No agent is needed: all of it is
//! the CLI against the store.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::Stdio;

use crate::support::*;

const TEAM: &str = "[[job]]\nname = \"nightly\"\nschedule = \"0 3 * * *\"\nshell = \"backup\"\n\n\
                    [[job]]\nname = \"old\"\nschedule = \"@daily\"\nshell = \"true\"\n\n\
                    [[job]]\nname = \"keep\"\nschedule = \"@hourly\"\nshell = { argv = [\"echo\", \"kept\"] }\n";
/// The job `old` of `TEAM`.
const OLD: &str = "[[job]]\nname = \"old\"\nschedule = \"@daily\"\nshell = \"true\"\n\n";
const NEW: &str = "\n[[job]]\nname = \"new\"\nschedule = \"@weekly\"\nshell = \"true\"\n";

/// Writes `text` to a file named `name` in the test's directory; returns its path.
fn file(nats: &Nats, name: &str, text: &str) -> String {
    let path = nats.dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// Runs the CLI; its exit code, stdout and stderr.
fn run(nats: &Nats, args: &[&str]) -> (i32, String, String) {
    let out = nats.cli(args);
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.code().unwrap(), text(out.stdout), text(out.stderr))
}

/// Every stored job's revision, by name: what a write would change.
async fn revisions(nats: &Nats) -> BTreeMap<String, u64> {
    nats.store().await.list_jobs().await.unwrap().into_iter().map(|j| (j.name, j.revision)).collect()
}

/// The team's jobs (owner `team`), one made by hand and one of another owner.
fn setup(nats: &Nats) {
    let team = file(nats, "team.toml", TEAM);
    nats.ok(&["apply", "-f", &team, "--owner", "team"]);
    nats.ok(&["add", "hand", "--schedule", "@daily", "--", "true"]);
    let other = file(nats, "other.toml", "[[job]]\nname = \"theirs\"\nschedule = \"@daily\"\nshell = \"true\"\n");
    nats.ok(&["apply", "-f", &other, "--owner", "other"]);
}

/// What is compared, the file, diff's options, its exit code and the lines it prints.
type DiffCase<'a> = (&'a str, &'a str, &'a [&'a str], i32, &'a [&'a str]);

#[tokio::test(flavor = "multi_thread")]
async fn diff_prints_what_apply_would_do_and_exits_as_diff() {
    let nats = Nats::start().await;
    setup(&nats);
    let before = revisions(&nats).await;
    // The same jobs written otherwise: keys reordered, the shorthand spelled out, defaults
    // given, a duration written another way.
    let reformatted = "[[job]]\nshell = { command = \"backup\" }\nname = \"nightly\"\ntimezone = \"UTC\"\n\
                       schedule = \"0 3 * * *\"\noverlap = \"skip\"\ncatchup_window = \"60m\"\n\n\
                       [[job]]\nname = \"old\"\nschedule = \"@daily\"\nshell = \"true\"\n\
                       [[job]]\nname = \"keep\"\nschedule = \"@hourly\"\nshell.argv = [\"echo\", \"kept\"]\n";
    let later = TEAM.replace("0 3 * * *", "0 4 * * *");
    let timed = TEAM.replace("shell = \"backup\"", "shell = \"backup\"\ntimeout = \"30s\"");
    let grown = format!("{TEAM}{NEW}");
    let shrunk = format!("{}{NEW}", TEAM.replace(OLD, ""));
    let cases: [DiffCase; 7] = [
        ("unchanged", TEAM, &["--owner", "team"], 0, &[]),
        ("reformatted", reformatted, &["--owner", "team", "--prune"], 0, &[]),
        (
            "a changed field",
            &later,
            &["--owner", "team"],
            1,
            &["~ job nightly: schedule \"0 3 * * *\" -> \"0 4 * * *\""],
        ),
        ("a field set", &timed, &["--owner", "team"], 1, &["~ job nightly: timeout (none) -> \"30s\""]),
        (
            "without the owner",
            TEAM,
            &[],
            1,
            &[
                "~ job nightly: labels.\"cronrun.io/owner\" \"team\" -> (none)",
                "~ job old: labels.\"cronrun.io/owner\" \"team\" -> (none)",
                "~ job keep: labels.\"cronrun.io/owner\" \"team\" -> (none)",
            ],
        ),
        ("a new job", &grown, &["--owner", "team", "--prune"], 1, &["+ job new"]),
        // `hand` (no owner) and `theirs` (owner other) are not the file's to remove.
        ("a job gone, with --prune", &shrunk, &["--owner", "team", "--prune"], 1, &["+ job new", "- job old"]),
    ];
    for (case, text, options, code, lines) in cases {
        let path = file(&nats, "jobs.toml", text);
        let args: Vec<&str> = ["diff", "-f", &path].iter().chain(options).copied().collect();
        let (status, stdout, stderr) = run(&nats, &args);
        assert_eq!(status, code, "{case}: {stdout}{stderr}");
        assert_eq!(stdout.lines().collect::<Vec<_>>(), lines, "{case}");
        assert_eq!(stderr, "", "{case}");
    }
    // Without --prune, a job the file no longer names is not said to go.
    let path = file(&nats, "jobs.toml", &shrunk);
    let (status, stdout, _) = run(&nats, &["diff", "-f", &path, "--owner", "team"]);
    assert_eq!((status, stdout.trim()), (1, "+ job new"));
    // JSON says the same.
    let (_, json, _) = run(&nats, &["diff", "-f", &path, "--owner", "team", "--prune", "--output", "json"]);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!((json["create"][0].as_str(), json["remove"][0].as_str()), (Some("new"), Some("old")), "{json}");

    // What cannot be compared exits 2 with one line naming the file (and the job).
    let bad = file(
        &nats,
        "bad.toml",
        &format!("{TEAM}\n[[job]]\nname = \"broken\"\nschedule = \"61 * * * *\"\nshell = \"x\"\n"),
    );
    let wildcard = file(&nats, "wildcard.toml", "[[job]]\nname = \"a.*\"\nschedule = \"@daily\"\nshell = \"x\"\n");
    let team = file(&nats, "team.toml", TEAM);
    let missing = nats.dir.path().join("missing.toml").to_str().unwrap().to_string();
    let refusals: [(&[&str], &str); 5] = [
        (&["diff", "-f", &missing], "missing.toml"),
        (&["diff", "-f", &bad], "bad.toml: job 4 (\"broken\"): schedule"),
        (&["diff", "-f", &wildcard], "wildcard.toml: job 1 (\"a.*\"): job name"),
        (&["diff", "-f", &team, "--owner", "team", "--prune", "--selector", "tier"], "--selector \"tier\""),
        (&["diff", "-f", &team, "--owner", "bad owner"], "--owner \"bad owner\""),
    ];
    for (args, says) in refusals {
        let (status, stdout, stderr) = run(&nats, args);
        assert_eq!((status, stdout.as_str()), (2, ""), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    assert_eq!(revisions(&nats).await, before, "diff wrote something");
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_prune_removes_only_the_owners_jobs_the_file_no_longer_names() {
    let nats = Nats::start().await;
    setup(&nats);
    let before = revisions(&nats).await;
    let shrunk = TEAM.replace(OLD, "").replace("0 3 * * *", "0 4 * * *");
    let path = file(&nats, "team.toml", &shrunk);

    // A dry run says what would happen and writes nothing.
    let dry = nats.ok(&["apply", "-f", &path, "--owner", "team", "--prune", "--dry-run"]);
    let expected = "~ job nightly: schedule \"0 3 * * *\" -> \"0 4 * * *\"\n- job old\n\
                    dry run: 0 to create, 1 to change, 1 to remove, 1 unchanged; nothing written\n";
    assert_eq!(dry, expected);
    assert_eq!(revisions(&nats).await, before, "a dry run wrote something");

    let out = nats.ok(&["apply", "-f", &path, "--owner", "team", "--prune"]);
    assert!(out.contains("applied nightly") && out.contains("unchanged keep"), "{out}");
    assert!(out.contains("removed old (0 run records, 0 keys of its KV store)"), "{out}");
    let after = revisions(&nats).await;
    assert_eq!(after.keys().collect::<Vec<_>>(), ["hand", "keep", "nightly", "theirs"]);
    assert_eq!((after["hand"], after["theirs"], after["keep"]), (before["hand"], before["theirs"], before["keep"]));
    // Removed as `rm` removes: with its audit event.
    let removed = events(&nats.store().await, "old", "removed").await;
    assert!(removed[0]["detail"].as_str().unwrap().contains("apply --prune"), "{removed:?}");

    // --selector narrows the owner's jobs that --prune removes.
    let tiers = "[[job]]\nname = \"x\"\nschedule = \"@daily\"\nshell = \"true\"\nlabels = { tier = \"x\" }\n\
                 [[job]]\nname = \"y\"\nschedule = \"@daily\"\nshell = \"true\"\nlabels = { tier = \"y\" }\n";
    nats.ok(&["apply", "-f", &file(&nats, "tiers.toml", tiers), "--owner", "tiers"]);
    let only_z = file(&nats, "tiers.toml", "[[job]]\nname = \"z\"\nschedule = \"@daily\"\nshell = \"true\"\n");
    let out = nats.ok(&["apply", "-f", &only_z, "--owner", "tiers", "--prune", "--selector", "tier=y"]);
    assert!(out.contains("removed y") && !out.contains("removed x"), "x has no tier=y: kept; {out}");

    // Refused with one line, nothing written: an empty file with --prune (it would remove
    // every job of the owner), a job the file gives to another owner, a bad job.
    let before = revisions(&nats).await;
    let empty = file(&nats, "empty.toml", "# nothing yet\n");
    let err = nats.fails(&["apply", "-f", &empty, "--owner", "team", "--prune"]);
    assert!(err.contains("empty.toml: no [[job]] tables found: add --allow-empty"), "{err}");
    let claimed =
        TEAM.replace("shell = \"backup\"", "shell = \"backup\"\nlabels = { \"cronrun.io/owner\" = \"other\" }");
    let err = nats.fails(&["apply", "-f", &file(&nats, "claimed.toml", &claimed), "--owner", "team", "--prune"]);
    assert!(err.contains("claimed.toml: job \"nightly\" is labelled cronrun.io/owner = \"other\""), "{err}");
    let bad = format!("{shrunk}\n[[job]]\nname = \"bad\"\nschedule = \"@daily\"\nshell = \"x\"\ntimeout = \"soon\"\n");
    let err = nats.fails(&["apply", "-f", &file(&nats, "bad.toml", &bad), "--owner", "team", "--prune"]);
    assert!(err.contains("bad.toml") && err.contains("soon"), "{err}");
    let (status, _, stderr) = run(&nats, &["apply", "-f", &path, "--prune"]);
    assert!(status != 0 && stderr.contains("--owner"), "--prune needs an owner: {stderr}");
    assert_eq!(revisions(&nats).await, before);

    // --allow-empty: every job of the owner goes, no other.
    nats.ok(&["apply", "-f", &empty, "--owner", "team", "--prune", "--allow-empty"]);
    let left: Vec<String> = revisions(&nats).await.into_keys().collect();
    assert_eq!(left, ["hand", "theirs", "x", "z"]);
}

/// Jobs of every kind: with an owner, by hand, Wasm (signed, config from a secret), chained,
/// on messages, with notices and an input schema.
const VARIED: &str = r#"
[[job]]
name = "extract"
schedule = "*/5 * * * *"
timezone = "Europe/Berlin"
timeout = "1h30m"
lock = true
retries = { max = 2, backoff = "1s500ms" }
history = { succeeded = 3, failed = 20 }
labels = { team = "data" }
input_schema = { type = "object", properties = { day = { type = "string" } } }
notify = [{ on = ["failed"], webhook = "https://example.com/hook" }]
shell = { argv = ["extract", "--all"], env = { DB = { secret = "db" }, MODE = "full" }, cwd = "/tmp" }

[[job]]
name = "load"
after = [{ job = "extract", on = "succeeded" }]
shell = "load"

[[job]]
name = "orders"
on = { subject = "orders.created", redeliver = 2 }
shell = "handle-order"

[[job]]
name = "greeter"
schedule = "@hourly"
wasm = { plugin = "sha256-9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", config = { greeting = "moin", token = { secret = "api" } }, allow_publish = ["greetings.>"], allow_http = ["https://example.com"], allow_kv = true, signature = "UABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGHIJKLMNOPQRSTUVWXYZ234:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", signed_at = "2026-12-01T10:00:00.123Z" }
"#;

#[tokio::test(flavor = "multi_thread")]
async fn export_then_apply_changes_nothing_and_diff_sees_nothing() {
    let nats = Nats::start().await;
    setup(&nats);
    for secret in ["db", "api"] {
        nats.ok(&["secret", "set", secret, "--file", &file(&nats, secret, "s3cret")]);
    }
    nats.ok(&["apply", "-f", &file(&nats, "varied.toml", VARIED), "--owner", "data"]);
    nats.ok(&["add", "by-hand", "--schedule", "@every 90s", "--env", "A=1", "--paused", "--", "echo", "a b"]);
    let before = revisions(&nats).await;

    let exported = nats.ok(&["export"]);
    let path = file(&nats, "exported.toml", &exported);
    let (status, stdout, stderr) = run(&nats, &["diff", "-f", &path]);
    assert_eq!((status, stdout.as_str(), stderr.as_str()), (0, "", ""), "{exported}");
    let applied = nats.ok(&["apply", "-f", &path]);
    assert!(applied.lines().all(|l| l.starts_with("unchanged ")), "{applied}");
    assert_eq!(revisions(&nats).await, before, "{exported}");

    // `export | apply -f -`, as a pipe.
    let mut apply =
        nats.command().args(["apply", "-f", "-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    apply.stdin.take().unwrap().write_all(exported.as_bytes()).unwrap();
    let out = apply.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(revisions(&nats).await, before);

    // One owner's jobs, to a file: what `apply --owner --prune` of it finds identical.
    let owned = nats.dir.path().join("data.toml");
    let owned = owned.to_str().unwrap();
    nats.ok(&["export", "--selector", "cronrun.io/owner=data", "-o", owned]);
    let text = std::fs::read_to_string(owned).unwrap();
    assert_eq!(text.matches("[[job]]").count(), 4, "{text}");
    let (status, stdout, _) = run(&nats, &["diff", "-f", owned, "--owner", "data", "--prune"]);
    assert_eq!((status, stdout.as_str()), (0, ""));
    nats.ok(&["apply", "-f", owned, "--owner", "data", "--prune"]);
    assert_eq!(revisions(&nats).await, before);

    let err = nats.fails(&["export", "--selector", "=x"]);
    assert!(err.contains("--selector \"=x\""), "{err}");
}

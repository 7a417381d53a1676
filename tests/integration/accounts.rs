//! Deployments in NATS accounts of their own (`cronrun auth init --account`) on one
//! server, and identities as `.creds` files of an operator (JWTs, as `nsc` makes them).

use std::time::Duration;

use crate::support::*;

/// A job of `name` in account `team` recording its fires in `dir`, printing `marker`.
fn team_job(name: &str, team: &str, nats: &Nats, marker: &str) -> String {
    let job = recording_job(name, nats.dir.path());
    job.replace("shell = '", &format!("description = \"{team}\"\nshell = 'echo {marker}; "))
}

fn fires(nats: &Nats, name: &str) -> usize {
    std::fs::read_to_string(nats.dir.path().join(format!("{name}.fires"))).unwrap_or_default().lines().count()
}

async fn admin(nats: &Nats) -> async_nats::Client {
    cronrun::connect::connect(&nats.url, Some(&nats.identity("admin")), "test-admin").await.unwrap()
}

/// Two deployments with one namespace and a job of one name, in two accounts: each runs
/// its own job within the JetStream limits `auth init` gave its account, and the first's
/// admin, the strongest identity it has, can neither see nor touch the second's.
#[tokio::test(flavor = "multi_thread")]
async fn deployments_in_two_accounts_run_apart_within_their_limits() {
    let teams = Nats::in_accounts(&[("TEAM_A", &["--max-file", "256MiB"]), ("TEAM_B", &[])]).await;
    let (a, b) = (&teams[0], &teams[1]);
    let (agent_a, agent_b) = (a.agent("agent-a", ""), b.agent("agent-b", ""));
    ready(&agent_a).await;
    ready(&agent_b).await;

    // Each account's JetStream is limited as auth init wrote it, and the layout fits it.
    let js_a = async_nats::jetstream::new(admin(a).await);
    assert_eq!(js_a.query_account().await.unwrap().limits.max_storage, Some(256 << 20));
    let mut reserved = 0;
    for stream in ["CRONRUN_DISPATCH", "CRONRUN_LOGS"] {
        reserved += js_a.get_stream(stream).await.unwrap().cached_info().config.max_bytes;
    }
    assert!(reserved > 0 && reserved <= 256 << 20, "A's streams reserve {reserved} bytes of its 256 MiB");
    let js_b = async_nats::jetstream::new(admin(b).await);
    assert_eq!(js_b.query_account().await.unwrap().limits.max_storage, Some(4 << 30), "the default --max-file");

    apply(a, &team_job("report", "team a", a, "output-of-a"));
    apply(b, &team_job("report", "team b", b, "output-of-b"));
    // Run ids derive from the fire: both accounts come to hold runs of the same keys.
    let same = eventually(Duration::from_secs(20), "both teams' jobs to run a fire each", || async {
        succeeded_runs(a).intersection(&succeeded_runs(b)).next().cloned()
    })
    .await;
    for (nats, team, own, other) in
        [(a, "team a", "output-of-a", "output-of-b"), (b, "team b", "output-of-b", "output-of-a")]
    {
        let spec: serde_json::Value = serde_json::from_str(&nats.ok(&["get", "report", "--output", "json"])).unwrap();
        assert_eq!(spec["spec"]["description"], team, "each account holds its own job of that name");
        let output = nats.ok(&["logs", &same]);
        assert!(output.contains(own) && !output.contains(other), "{team} reads run {same} as: {output}");
    }

    // A's admin removes the job of that name: B's job goes on, its spec intact.
    a.ok(&["rm", "report"]);
    let b_before = fires(b, "report");
    eventually(Duration::from_secs(20), "B's job to run twice more", || async {
        (fires(b, "report") >= b_before + 2).then_some(())
    })
    .await;
    assert!(b.ok(&["get", "report", "--output", "json"]).contains("team b"));
}

/// The keys (`job.run_id`) of the runs that succeeded, as `cronrun runs` lists them.
fn succeeded_runs(nats: &Nats) -> std::collections::BTreeSet<String> {
    let runs: Vec<serde_json::Value> = serde_json::from_str(&nats.ok(&["runs", "--output", "json"])).unwrap();
    let succeeded = runs.iter().filter(|r| r["status"] == "succeeded");
    succeeded.map(|r| format!("{}.{}", r["job"].as_str().unwrap(), r["run_id"].as_str().unwrap())).collect()
}

/// `auth init --account` refuses, in one line and writing nothing, an account name
/// nats-server would misread, storage too small for cronrun or absurd, and sizes given
/// without an account.
#[test]
fn auth_init_refuses_bad_accounts_and_sizes_writing_nothing() {
    let dir = test_dir();
    let ids = dir.path().join("ids");
    let cases: [(&[&str], &str); 6] = [
        (&["--account", "a.b"], "--account \"a.b\": give 1 to 64 of"),
        (&["--account", "$SYS"], "--account \"$SYS\""),
        (&["--account", "A", "--max-file", "1MiB"], "needs at least 64 MiB"),
        (&["--account", "A", "--max-file", "99999999TiB"], "at most 1PiB"),
        (&["--account", "A", "--max-mem", "lots"], "--max-mem \"lots\": give a size like"),
        (&["--max-file", "1GiB"], "give --account NAME with them"),
    ];
    for (flags, expected) in cases {
        let out =
            std::process::Command::new(BIN).args(["auth", "init", "--dir"]).arg(&ids).args(flags).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(expected), "{flags:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{flags:?}: {err}");
        assert!(!ids.exists(), "{flags:?} wrote {}", ids.display());
    }
}

/// Identities as `.creds` files of user JWTs (operator mode, as `nsc` makes them) with the
/// allow-lists `cronrun auth permissions ROLE` prints: the agent's scheduler and runner,
/// each on its own, fire and run what the admin applied, and the runner's JWT is refused
/// what its role must not do.
#[tokio::test(flavor = "multi_thread")]
async fn creds_files_of_an_operator_run_jobs_and_keep_each_role_to_its_rights() {
    let nats = Nats::with_operator("64KB").await;
    assert!(nats.identity("runner").ends_with("runner.creds"));
    let agent = nats.agent_with_scheduler_creds("creds", "1s", &nats.identity("scheduler"));
    ready(&agent).await;
    apply(&nats, &recording_job("tick", nats.dir.path()));
    eventually(Duration::from_secs(20), "the job to run twice", || async { (fires(&nats, "tick") >= 2).then_some(()) })
        .await;
    assert!(succeeded_runs(&nats).iter().any(|key| key.starts_with("tick.")), "the admin reads the runs");

    let file = nats.dir.path().join("evil.toml");
    std::fs::write(&file, "[[job]]\nname = \"evil\"\nschedule = \"* * * * *\"\nshell = \"id\"\n").unwrap();
    let out = nats
        .command()
        .env("CRONRUN_CREDS", nats.identity("runner"))
        .args(["apply", "-f", file.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("Permissions Violation"), "the runner applied a job: {err}");
    assert!(!nats.cli(&["get", "evil"]).status.success(), "the runner's job was stored");
}

/// A role's JWT is longer than the 4 KB CONNECT line nats-server takes by default: the
/// refusal says which server setting to raise, in one line.
#[tokio::test(flavor = "multi_thread")]
async fn a_jwt_longer_than_the_servers_control_line_is_named_in_one_line() {
    let nats = Nats::with_operator("4KB").await;
    let err = nats.fails(&["ls"]);
    assert!(err.contains("max_control_line: 64KB"), "{err}");
}

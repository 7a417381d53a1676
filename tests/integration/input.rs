//! Bad input is refused with one line naming what is wrong, and nothing is written; a
//! malformed spec put straight into KV harms nothing; the layout is created once.

use std::time::Duration;

use crate::support::*;
use cronrun::record::Status;

#[tokio::test(flavor = "multi_thread")]
async fn bad_cli_input_is_refused_and_nothing_is_written() {
    let nats = Nats::start().await;
    let cases: &[(&[&str], &str)] = &[
        (&["add", "j", "--schedule", "61 * * * *", "--", "true"], "minute"),
        (&["add", "j", "--schedule", "* * * * * * * *", "--", "true"], "schedule"),
        (&["add", "j", "--schedule", "@every 500ms", "--", "true"], "schedule"),
        (&["add", "j", "--schedule", "* * * * *", "--tz", "Mars/Base", "--", "true"], "timezone"),
        (&["add", "j", "--schedule", "* * * * *", "--timeout", "soon", "--", "true"], "timeout"),
        (&["add", "j", "--schedule", "* * * * *", "--overlap", "never", "--", "true"], "overlap"),
        (&["add", "j", "--schedule", "* * * * *", "--timeout", "1000000000years", "--", "true"], "timeout"),
        (&["add", "j", "--schedule", "* * * * *", "--cwd", "relative", "--", "true"], "cwd"),
        (&["add", "j", "--schedule", "* * * * *", "--env", "NOEQUALS", "--", "true"], "KEY=VALUE"),
        (&["add", "bad.name", "--schedule", "* * * * *", "--", "true"], "A-Z a-z 0-9 _ -"),
        (&["add", "", "--schedule", "* * * * *", "--", "true"], "A-Z a-z 0-9 _ -"),
        (&["next", "0 0 31 2 *"], "day-of-month"),
        (&["next", "* * * * *", "--from", "yesterday"], "RFC 3339"),
        // No fire after now: never (2100 has no 29 February), or no more (2020 is over).
        (&["add", "j", "--schedule", "0 0 0 29 FEB ? 2100", "--", "true"], "never fires"),
        (&["add", "j", "--schedule", "0 0 0 1 JAN ? 2020", "--", "true"], "has no fire after"),
        (&["next", "0 0 0 29 FEB ? 2100"], "2100 is not one"),
        (&["next", "@at 2020-01-01T00:00:00Z"], "has no fire after"),
        (&["validate", "--schedule", "0 0 0 29 FEB ? 2100"], "never fires"),
        (&["validate", "--schedule", "0 0 0 1 JAN ? 2020"], "the last year it allows is 2020"),
        (&["logs", "nodot"], "JOB.RUN_ID"),
        (&["kill", "j.r", "--signal", "NOPE"], "signal"),
        (&["get", "missing"], "not found"),
        (&["pause"], "--all"),
    ];
    for (args, expect) in cases {
        let err = nats.fails(args);
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(err.contains(expect), "{args:?}: {err:?} should mention {expect:?}");
    }
    assert!(nats.store().await.list_jobs().await.unwrap().is_empty(), "a refused add wrote something");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_jobs_file_writes_nothing() {
    let nats = Nats::start().await;
    let path = nats.dir.path().join("jobs.toml");
    let good = "[[job]]\nname = \"good\"\nschedule = \"@daily\"\nshell = \"true\"\n";
    let files = [
        (
            format!("{good}\n[[job]]\nname = \"b\"\nschedule = \"@daily\"\nshell = \"true\"\ncolour = \"red\"\n"),
            "jobs.toml:10",
            "colour",
        ),
        (format!("{good}\n[[job]]\nname = \"b\"\nschedule = \"@hourly\"\n"), "job 2", "shell"),
        (format!("{good}\n[[job]]\nname = \"b\"\nschedule = \"1-2-3 * * * *\"\nshell = \"x\"\n"), "job 2", "minute"),
        (format!("{good}{good}"), "jobs.toml", "appears twice"),
        (
            format!("{good}\n[[job]]\nname = \"b\"\nschedule = \"0 0 0 29 FEB ? 2100\"\nshell = \"x\"\n"),
            "job 2",
            "never fires",
        ),
        ("[[job]\n".to_string(), "jobs.toml:1", "jobs.toml"),
        (String::new(), "jobs.toml", "no [[job]]"),
    ];
    for (text, at, what) in &files {
        std::fs::write(&path, text).unwrap();
        for cmd in ["apply", "validate"] {
            let err = nats.fails(&[cmd, "-f", path.to_str().unwrap()]);
            assert!(err.contains(at) && err.contains(what), "{cmd}: {err:?} should say {at} and {what}");
        }
    }
    assert!(nats.store().await.list_jobs().await.unwrap().is_empty(), "a refused file wrote something");
    let err = nats.fails(&["apply", "-f", "/nonexistent/jobs.toml"]);
    assert!(err.contains("cannot read /nonexistent/jobs.toml"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_spec_in_kv_is_skipped_and_explained() {
    let nats = Nats::start().await;
    let store = nats.store().await;
    // What an operator might `nats kv put`: not JSON, an unknown field, a bad schedule.
    let bad = [
        ("garbage", "{not json"),
        ("extra", r#"{"name":"extra","schedule":"* * * * * *","shell":"true","colour":1}"#),
        ("sched", r#"{"name":"sched","schedule":"99 * * * *","shell":"true"}"#),
        ("renamed", r#"{"name":"other","schedule":"* * * * * *","shell":"true"}"#),
        // Durations that once overflowed the shard task's date arithmetic at the first fire.
        ("jitter", r#"{"name":"jitter","schedule":"* * * * * *","shell":"true","jitter":"2000000years"}"#),
        (
            "backoff",
            r#"{"name":"backoff","schedule":"* * * * * *","shell":"false","retries":{"max":1,"backoff":"9000000years"}}"#,
        ),
    ];
    for (key, value) in bad {
        store.jobs.kv.put(key, value.into()).await.unwrap();
    }
    let agent = nats.agent("a", "");
    ready(&agent).await;
    nats.ok(&["add", "fine", "--schedule", "* * * * * *", "--", "true"]);
    eventually(Duration::from_secs(10), "the good job to run", || async {
        runs(&store, "fine").await.iter().any(|r| r.status == Status::Succeeded).then_some(())
    })
    .await;
    for (key, _) in bad {
        assert!(runs(&store, key).await.is_empty(), "{key} ran");
        let err = nats.fails(&["validate", key]);
        assert!(err.contains("invalid"), "{err}");
        let out = nats.cli(&["get", key]);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("stored but invalid"));
    }
    assert!(nats.fails(&["validate", "sched"]).contains("minute"));
    assert!(nats.fails(&["validate", "extra"]).contains("colour"));
    assert!(nats.fails(&["validate", "jitter"]).contains("jitter 2000000years is over the limit of 1day"));
    assert!(nats.ok(&["ls"]).contains("INVALID"));
    assert!(agent.log().contains("job skipped"), "the agent logs why");
    // Fixing it in place makes it run, without a restart.
    store.jobs.kv.put("sched", r#"{"name":"sched","schedule":"* * * * * *","shell":"true"}"#.into()).await.unwrap();
    eventually(Duration::from_secs(10), "the fixed job to run", || async {
        (!runs(&store, "sched").await.is_empty()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn layout_is_created_once_and_existing_streams_are_left_alone() {
    let nats = Nats::start().await;
    let client = nats.client().await;
    let js = async_nats::jetstream::new(client);
    // An operator created the logs stream with a shorter age than cronrun's default.
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "CRONRUN_LOGS".into(),
        subjects: vec!["cronrun.logs.>".into()],
        max_age: Duration::from_secs(3600),
        ..Default::default()
    })
    .await
    .unwrap();
    let opens = (0..10).map(|_| nats.store());
    let stores = futures::future::join_all(opens).await;
    assert_eq!(stores.len(), 10);
    let mut logs = js.get_stream("CRONRUN_LOGS").await.unwrap();
    assert_eq!(logs.info().await.unwrap().config.max_age, Duration::from_secs(3600));
    let mut dispatch = js.get_stream("CRONRUN_DISPATCH").await.unwrap();
    let info = dispatch.info().await.unwrap();
    assert_eq!(info.config.retention, async_nats::jetstream::stream::RetentionPolicy::WorkQueue);
    assert_eq!(info.config.subjects, ["cronrun.dispatch.>"]);
    for bucket in ["cronrun_jobs", "cronrun_runs", "cronrun_leases"] {
        js.get_key_value(bucket).await.unwrap();
    }
    let jobs = js.get_stream("KV_cronrun_jobs").await.unwrap().info().await.unwrap().config.max_messages_per_subject;
    assert!(jobs >= 5, "jobs history {jobs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lease_that_is_not_renewed_expires_on_the_server() {
    use cronrun::store::lease::Lease;
    let nats = Nats::start().await;
    let store = nats.store().await;
    // Renewed every half second: a margin of 1.5 s for a renewal late on a loaded machine.
    let ttl = Duration::from_secs(2);
    let mut lease = Lease::try_acquire(&store.leases, "lock.t", "one", ttl).await.unwrap().unwrap();
    assert!(Lease::try_acquire(&store.leases, "lock.t", "two", ttl).await.unwrap().is_none());
    // Renewals past the first TTL keep it alive: each sets the TTL again.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        lease.renew().await.unwrap();
        assert!(Lease::try_acquire(&store.leases, "lock.t", "two", ttl).await.unwrap().is_none());
    }
    // Renewals stop: the server removes the key within its TTL (plus the server's sweep).
    let stopped = std::time::Instant::now();
    let taken = eventually(Duration::from_secs(10), "the lease to expire", || async {
        Lease::try_acquire(&store.leases, "lock.t", "two", ttl).await.unwrap()
    })
    .await;
    println!("lease expired {} ms after the last renewal", stopped.elapsed().as_millis());
    // The stale holder's renewal is refused: its revision is no longer current.
    assert!(lease.renew().await.unwrap_err().is_conflict());
    // And the new lease, created over the expiry marker, expires too.
    drop(taken);
    eventually(Duration::from_secs(10), "the second lease to expire", || async {
        Lease::try_acquire(&store.leases, "lock.t", "three", ttl).await.unwrap()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn output_into_a_closed_pipe_ends_quietly() {
    let nats = Nats::start().await;
    nats.ok(&["add", "tick", "--schedule", "@hourly", "--", "true"]);
    for args in [&["ls"][..], &["get", "tick"], &["status", "--output", "json"]] {
        // `cronrun ls | head -0`: the reader is gone before the first write.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = nats.command().args(args).stdout(writer).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}

/// `next` finds fires as far as the grammar reaches (years up to 2199, past the 50
/// years cronsim looks), reads `a-a/s` as `a` (cronsim 2.9), and `validate` accepts what
/// fires, however far; a stored spec that would now be refused still loads.
#[tokio::test(flavor = "multi_thread")]
async fn far_fires_are_found_and_equal_ended_steps_are_single_values() {
    let nats = Nats::start().await;
    let json = |args: &[&str]| -> Vec<String> { serde_json::from_str(&nats.ok(args)).unwrap() };
    let from = "2026-12-06T00:00:00Z";
    assert_eq!(
        json(&["next", "0 0 0 1 JAN ? 2090", "--from", from, "-n", "2", "--output", "json"]),
        ["2090-01-01T00:00:00Z"]
    );
    assert_eq!(
        json(&["next", "0 0 0 29 FEB ? 2096", "--from", from, "-n", "1", "--output", "json"]),
        ["2096-02-29T00:00:00Z"]
    );
    assert_eq!(
        json(&["next", "0 22-22/4 * * *", "--from", from, "-n", "2", "--output", "json"]),
        ["2026-12-06T22:00:00Z", "2026-12-07T22:00:00Z"]
    );
    for expr in ["0 0 0 1 JAN ? 2090", "0 0 L 2 ?", "0 22-22/4 * * *", "@at 2020-01-01T00:00:00Z"] {
        assert!(nats.ok(&["validate", "--schedule", expr]).contains("is valid"), "{expr}");
    }
    // A spec stored before the check keeps loading: shown, listed as valid, and only
    // `validate NAME` says it would be refused if written now.
    let store = nats.store().await;
    let leap = r#"{"name":"leap","schedule":"0 0 0 29 FEB ? 2100","shell":"true"}"#;
    store.jobs.kv.put("leap", leap.into()).await.unwrap();
    assert!(nats.ok(&["get", "leap"]).contains("2100"));
    assert!(!nats.ok(&["ls"]).contains("INVALID"));
    let err = nats.fails(&["validate", "leap"]);
    assert!(err.contains("would be refused if written now") && err.contains("never fires"), "{err}");
}

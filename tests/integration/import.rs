//! `cronrun import`: each entry mapped or said why not, nothing written on a dry run or a
//! bad entry. crontab: settings applied to what follows, `%` as standard input, the jobs
//! firing at the instants cronsim gives for the same lines; a Kubernetes CronJob's command
//! run with its env; Cronken's schedules read as APScheduler read them, and run.

use std::time::Duration;

use crate::support::*;

const CRONTAB: &str = "# a user's crontab\n\
MAILTO=ops@example.com\n\
HELLO=\"from cron\"\n\
0 3 * * * cat %first line%second \\% line\n\
CRON_TZ=Europe/Berlin\n\
30 2 * * * echo $HELLO\n\
@reboot /usr/local/bin/warm-cache\n\
*/20 9-17 * * mon-fri true\n";

#[tokio::test(flavor = "multi_thread")]
async fn a_crontab_is_imported_line_by_line_and_fires_as_cronsim_says() {
    let nats = Nats::start().await;
    let port = free_port();
    let agent = nats.agent("a", &format!("http.listen = \"127.0.0.1:{port}\""));
    ready(&agent).await;
    let file = nats.dir.path().join("crontab");
    std::fs::write(&file, CRONTAB).unwrap();
    let file = file.to_str().unwrap();

    let dry = nats.ok(&["import", "crontab", file, "--tz", "UTC", "--dry-run"]);
    for expected in [
        "line 4: crontab-4 `0 3 * * *` (UTC)",
        "line 6: crontab-6 `30 2 * * *` (Europe/Berlin): echo $HELLO",
        "line 7: not imported: @reboot has no equivalent",
        "line 8: crontab-8 `*/20 9-17 * * mon-fri` (Europe/Berlin)",
        "MAILTO is not used",
        "dry run: 3 job(s) would be imported, nothing written",
    ] {
        assert!(dry.contains(expected), "{expected:?} missing from:\n{dry}");
    }
    nats.fails(&["get", "crontab-4"]);

    // One bad line: one line of error, nothing written.
    let bad = nats.dir.path().join("bad");
    std::fs::write(&bad, format!("{CRONTAB}61 * * * * true\n")).unwrap();
    let err = nats.fails(&["import", "crontab", bad.to_str().unwrap(), "--tz", "UTC"]);
    assert!(err.contains(":9: ") && err.contains("minute"), "{err}");
    nats.fails(&["get", "crontab-4"]);

    // Without --tz, entries before any CRON_TZ are in the importing user's zone (`TZ`).
    let imported_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let out = nats.command().env("TZ", "America/New_York").args(["import", "crontab", file]).output().unwrap();
    let done = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && done.contains("imported 3 job(s)"), "{done}");
    let got: serde_json::Value = serde_json::from_str(&nats.ok(&["get", "crontab-6", "--output", "json"])).unwrap();
    let spec = &got["spec"];
    assert_eq!((spec["timezone"].as_str(), spec["overlap"].as_str()), (Some("Europe/Berlin"), Some("allow")));
    assert_eq!(spec["shell"]["env"]["HELLO"], "from cron");

    // `%` ends the command; the rest is its standard input, `\%` a plain `%`.
    let record = final_record(&nats.store().await, &nats.trigger("crontab-4")).await;
    assert_eq!(record.output, ["first line", "second % line"], "{record:?}");

    // The fires of each stored job, against cronsim's for the line it came from in the
    // zone the crontab meant: over the spring changes in New York (March 14, 2027) and in
    // Berlin (March 28, where 02:30 does not exist).
    let start = "2027-03-10T00:00:00Z";
    let lines = [
        ("crontab-4", "0 3 * * *", "America/New_York"),
        ("crontab-6", "30 2 * * *", "Europe/Berlin"),
        ("crontab-8", "*/20 9-17 * * mon-fri", "Europe/Berlin"),
    ];
    // Then the next two from the import on, one of which the scheduler has queued.
    let cases: Vec<String> = [(start, 30), (imported_at.as_str(), 2)]
        .iter()
        .flat_map(|&(from, n)| {
            lines.iter().map(move |(_, expr, tz)| serde_json::json!({ "expr": expr, "tz": tz, "start": from, "n": n }))
        })
        .map(|case| case.to_string())
        .collect();
    let cases_file = nats.dir.path().join("cases.jsonl");
    std::fs::write(&cases_file, cases.join("\n") + "\n").unwrap();
    let oracle = concat!(env!("CARGO_MANIFEST_DIR"), "/../time/tests/oracle/cronsim_oracle.py");
    let out = std::process::Command::new("python3").arg(oracle).arg(&cases_file).output().unwrap();
    assert!(out.status.success(), "cronsim oracle: {}", String::from_utf8_lossy(&out.stderr));
    let answers: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for ((job, expr, tz), answer) in lines.iter().zip(&answers) {
        let stored: serde_json::Value = serde_json::from_str(&nats.ok(&["get", job, "--output", "json"])).unwrap();
        let (schedule, zone) =
            (stored["spec"]["schedule"].as_str().unwrap(), stored["spec"]["timezone"].as_str().unwrap());
        assert_eq!(zone, *tz, "{job}: the zone the crontab meant");
        let ours: Vec<String> = serde_json::from_str(
            &nats.ok(&["next", schedule, "--tz", zone, "--from", start, "-n", "30", "--output", "json"]),
        )
        .unwrap();
        assert_eq!(ours, fires(answer), "{job} (`{expr}` in {tz})");
    }
    for ((job, expr, tz), answer) in lines.iter().zip(&answers[lines.len()..]) {
        let queued =
            eventually(Duration::from_secs(10), "the leader's next fires", || async { next_fire(port, job) }).await;
        assert!(
            fires(answer).contains(&queued),
            "{job} (`{expr}` in {tz}): queued for {queued}, cronsim says {answer}"
        );
    }
}

/// The fires in an answer of the cronsim oracle, as `cronrun next --output json` prints them.
fn fires(answer: &serde_json::Value) -> Vec<String> {
    answer["fires"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .map(|t| chrono::DateTime::parse_from_rfc3339(t.as_str().unwrap()).unwrap().to_utc())
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
        .collect()
}

/// The next fire of `job` as its shard's leader has queued it (published on `/metrics`).
fn next_fire(port: u16, job: &str) -> Option<String> {
    let seconds = metric(port, &format!("cronrun_job_next_fire_timestamp_seconds{{job=\"{job}\"}}"))?;
    let at = chrono::DateTime::from_timestamp_millis((seconds * 1000.0).round() as i64)?;
    Some(at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
}

const CRON_JOBS: &str = r#"
apiVersion: batch/v1
kind: CronJob
metadata: { name: report, namespace: prod }
spec:
  schedule: "0 6 * * *"
  timeZone: Europe/Berlin
  concurrencyPolicy: Forbid
  startingDeadlineSeconds: 300
  jobTemplate:
    spec:
      backoffLimit: 1
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: report
              image: alpine:3
              command: ["sh", "-c", "echo $GREETING from k8s"]
              env: [{ name: GREETING, value: hello }]
---
apiVersion: batch/v1
kind: CronJob
metadata: { name: cleanup }
spec:
  schedule: "*/5 * * * *"
  suspend: true
  jobTemplate:
    spec:
      template:
        spec:
          containers: [{ name: cleanup, image: alpine:3, command: ["true"] }]
---
apiVersion: batch/v1
kind: CronJob
metadata: { name: sweep }
spec:
  schedule: "*/5 * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          containers: [{ name: sweep, image: alpine:3, command: ["true"] }]
---
apiVersion: apps/v1
kind: Deployment
metadata: { name: web }
"#;

/// `import k8s-cronjob`: a dry run and a bad file write nothing; the job written runs the
/// container's command with its env, as the CronJob did.
#[tokio::test(flavor = "multi_thread")]
async fn a_kubernetes_cron_job_is_imported_and_runs_its_command() {
    let nats = Nats::start().await;
    let port = free_port();
    let agent = nats.agent("a", &format!("http.listen = \"127.0.0.1:{port}\""));
    ready(&agent).await;
    let file = nats.dir.path().join("cronjobs.yaml");
    std::fs::write(&file, CRON_JOBS).unwrap();
    let file = file.to_str().unwrap();

    let dry = nats.ok(&["import", "k8s-cronjob", file, "--dry-run"]);
    for expected in [
        "CronJob report: report `0 6 * * *` (Europe/Berlin): sh -c echo $GREETING from k8s",
        "Deployment web: not imported: not a CronJob",
        "CronJob report: the command runs on the runner's host, not in image alpine:3",
        "dry run: 3 job(s) would be imported, nothing written",
    ] {
        assert!(dry.contains(expected), "{expected:?} missing from:\n{dry}");
    }
    nats.fails(&["get", "report"]);

    let bad = nats.dir.path().join("bad.yaml");
    std::fs::write(&bad, CRON_JOBS.replace("Forbid", "Sometimes")).unwrap();
    let err = nats.fails(&["import", "k8s-cronjob", bad.to_str().unwrap()]);
    assert!(err.contains("bad.yaml: document 1: CronJob report: concurrencyPolicy \"Sometimes\""), "{err}");
    nats.fails(&["get", "report"]);

    assert!(nats.ok(&["import", "k8s-cronjob", file]).contains("imported 3 job(s)"));
    let got: serde_json::Value = serde_json::from_str(&nats.ok(&["get", "report", "--output", "json"])).unwrap();
    let spec = &got["spec"];
    assert_eq!((spec["overlap"].as_str(), spec["retries"]["max"].as_u64()), (Some("skip"), Some(1)));
    assert_eq!((spec["starting_deadline"].as_str(), spec["paused"].as_bool()), (Some("5m"), Some(false)), "{spec}");
    // `suspend: true` is a paused job: stored, and not queued to fire until resumed.
    let got: serde_json::Value = serde_json::from_str(&nats.ok(&["get", "cleanup", "--output", "json"])).unwrap();
    assert_eq!(got["spec"]["paused"].as_bool(), Some(true), "{got}");
    // `sweep`, written after it in the same shard, is queued: so was `cleanup` seen.
    let shard = |job| cronrun::scheduler::shard_of(job, TEST_SHARDS);
    assert_eq!(shard("sweep"), shard("cleanup"));
    let metrics = eventually(Duration::from_secs(10), "sweep's next fire", || async {
        next_fire(port, "sweep")?;
        http_get(port, "/metrics").map(|(_, text)| text)
    })
    .await;
    assert!(!metrics.contains(r#"job="cleanup""#), "a suspended CronJob is not queued:\n{metrics}");
    let record = final_record(&nats.store().await, &nats.trigger("report")).await;
    assert_eq!(record.output, ["hello from k8s"], "{record:?}");
}

/// `import cronken`: schedules mean what they meant under APScheduler (said in a note),
/// and an imported every-second job runs once per second as its own file records.
#[tokio::test(flavor = "multi_thread")]
async fn cronken_jobs_are_imported_and_fire_as_cronken_fired_them_and_a_bad_file_writes_nothing() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let dir = nats.dir.path();
    let definitions = serde_json::json!({
        "ticker": { "cron_args": { "second": "*" },
                    "job_args": { "cmd": format!("echo $CRONRUN_SCHEDULED_AT >> {}/ticker.fires", dir.display()),
                                  "lock": true, "ttl": 10 } },
        "weekdays": { "cron_args": { "cronstring": "0 9 * * 1-5" },
                      "job_args": { "cmd": "true", "lock": "reports", "ttl": 10 },
                      "job_state": { "paused": true } },
    });
    let file = dir.join("jobs.json");
    std::fs::write(&file, definitions.to_string()).unwrap();
    // A dry run, and a file with one bad definition, write nothing.
    let dry = nats.ok(&["import", "cronken", file.to_str().unwrap(), "--tz", "UTC", "--dry-run"]);
    assert!(dry.contains("dry run: 2 job(s) would be imported, nothing written"), "{dry}");
    let mut bad = definitions.clone();
    bad["broken"] = serde_json::json!({ "cron_args": { "second": "61" }, "job_args": { "cmd": "true" } });
    let bad_file = dir.join("bad.json");
    std::fs::write(&bad_file, bad.to_string()).unwrap();
    let err = nats.fails(&["import", "cronken", bad_file.to_str().unwrap(), "--tz", "UTC"]);
    assert!(err.contains("broken"), "{err}");
    for job in ["ticker", "weekdays"] {
        nats.fails(&["get", job]);
    }
    let out = nats.ok(&["import", "cronken", file.to_str().unwrap(), "--tz", "UTC"]);
    for expected in [
        "job weekdays: weekdays `0 9 * * tue,wed,thu,fri,sat` (UTC)",
        "counts from Monday in Cronken",
        "imported 2 job(s)",
    ] {
        assert!(out.contains(expected), "{expected:?} missing from:\n{out}");
    }
    let got: serde_json::Value = serde_json::from_str(&nats.ok(&["get", "weekdays", "--output", "json"])).unwrap();
    assert_eq!((got["spec"]["lock"].as_str(), got["spec"]["paused"].as_bool()), (Some("reports"), Some(true)));
    let from = ceil_second(chrono::Utc::now()) + chrono::Duration::seconds(2);
    assert_jobs_ran_each_second_once(&["ticker".to_string()], dir, from, 4).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_import_files_are_refused_in_one_line_and_write_nothing() {
    let nats = Nats::start().await;
    let dir = nats.dir.path();
    // A stored job runs after `backup`: importing a `backup` that keeps no successful runs
    // would leave it never running, as `apply` refuses.
    let chained = dir.join("chained.toml");
    std::fs::write(&chained, "[[job]]\nname = \"report\"\nshell = \"true\"\nafter = [{ job = \"backup\" }]\n").unwrap();
    nats.ok(&["apply", "-f", chained.to_str().unwrap()]);
    let cron_job = |name: &str, schedule: &str, command: &str, extra: &str| {
        format!(
            "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: {name}\nspec:\n  schedule: {schedule:?}\n{extra}  \
             jobTemplate:\n    spec:\n      template:\n        spec:\n          containers:\n          - name: c\n            \
             image: alpine\n            command: [{command:?}]\n"
        )
    };
    // Nine levels of nine aliases: a billion "lol"s if expanded.
    let laughs = (1..10).fold(
        "kind: CronJob\nmetadata:\n  name: laughs\nl0: &l0 [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n".to_string(),
        |text, i| text + &format!("l{i}: &l{i} [{}]\n", vec![format!("*l{}", i - 1); 9].join(",")),
    );
    // (format, file text, job it would have written, what the one line says)
    let cases = [
        (
            "cronken",
            r#"{"nul": {"cron_args": {"second": "*"}, "job_args": {"cmd": "true\u0000", "lock": false}}}"#.to_string(),
            "nul",
            "NUL",
        ),
        ("k8s-cronjob", cron_job("argv", "* * * * *", "date\0", ""), "argv", "NUL"),
        (
            "k8s-cronjob",
            cron_job("backup", "@daily", "true", "  successfulJobsHistoryLimit: 0\n"),
            "backup",
            "report runs after backup, which keeps no succeeded runs",
        ),
        // A name that would split the line, told escaped.
        ("k8s-cronjob", cron_job("\"two\\nlines\"", "61 * * * *", "true", ""), "two-lines", r#"CronJob "two\nlines""#),
        ("k8s-cronjob", laughs, "laughs", "repetition limit exceeded"),
    ];
    for (format, text, job, needle) in cases {
        let file = dir.join(format!("{job}.in"));
        std::fs::write(&file, &text).unwrap();
        let err = nats.fails(&["import", format, file.to_str().unwrap(), "--tz", "UTC"]);
        assert!(err.contains(needle), "{format} {text:?}: {needle:?} missing from {err}");
        nats.fails(&["get", job]);
    }
    // Options are told as theirs, before any entry is read.
    let crontab = dir.join("crontab");
    std::fs::write(&crontab, "* * * * * true\n").unwrap();
    for (option, value, needle) in [
        ("--tz", "Mars/Olympus_Mons", "--tz \"Mars/Olympus_Mons\": unknown time zone"),
        ("--prefix", "nightly.>", "--prefix \"nightly.>\": must be 1 to 100 characters"),
    ] {
        let err = nats.fails(&["import", "crontab", crontab.to_str().unwrap(), option, value]);
        assert!(err.contains(needle) && !err.contains("line 1"), "{option} {value}: {err}");
    }
    assert!(nats.ok(&["ls"]).lines().all(|l| !l.contains("crontab-1") && !l.contains("nightly")), "nothing imported");
    // A file that never ends is refused once past the limit, not read to the end.
    let err = nats.fails(&["import", "crontab", "/dev/zero"]);
    assert!(err.contains("over 67108864 bytes"), "{err}");
    let err = nats.fails(&["apply", "-f", "/dev/zero"]);
    assert!(err.contains("over 67108864 bytes"), "{err}");
}

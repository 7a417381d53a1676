//! `cronrun import crontab`: each line mapped or said why not, nothing written on a dry
//! run or a bad line, settings applied to what follows, `%` as standard input, and the
//! imported jobs firing at the instants cronsim gives for the same lines.

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
    let agent = nats.agent("a", "");
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

    let done = nats.ok(&["import", "crontab", file, "--tz", "UTC"]);
    assert!(done.contains("imported 3 job(s)"), "{done}");
    let got: serde_json::Value = serde_json::from_str(&nats.ok(&["get", "crontab-6", "--output", "json"])).unwrap();
    let spec = &got["spec"];
    assert_eq!((spec["timezone"].as_str(), spec["overlap"].as_str()), (Some("Europe/Berlin"), Some("allow")));
    assert_eq!(spec["shell"]["env"]["HELLO"], "from cron");

    // `%` ends the command; the rest is its standard input, `\%` a plain `%`.
    let key = nats.trigger("crontab-4");
    let (job, run) = cronrun::record::parse_run_key(&key).unwrap();
    let store = nats.store().await;
    let record = eventually(Duration::from_secs(20), "the imported job's run", || async {
        store.get_run(job, run).await.ok().map(|s| s.record).filter(|r| r.status.is_final())
    })
    .await;
    assert_eq!(record.output, ["first line", "second % line"], "{record:?}");

    // The fires of each imported line, against cronsim's for the same line and zone
    // (over the spring change in Berlin, where 02:30 does not exist).
    let start = "2027-03-26T00:00:00Z";
    let lines = [("0 3 * * *", "UTC"), ("30 2 * * *", "Europe/Berlin"), ("*/20 9-17 * * mon-fri", "Europe/Berlin")];
    let cases: Vec<String> = lines
        .iter()
        .map(|(expr, tz)| serde_json::json!({ "expr": expr, "tz": tz, "start": start, "n": 12 }).to_string())
        .collect();
    let cases_file = nats.dir.path().join("cases.jsonl");
    std::fs::write(&cases_file, cases.join("\n") + "\n").unwrap();
    let oracle = concat!(env!("CARGO_MANIFEST_DIR"), "/../time/tests/oracle/cronsim_oracle.py");
    let out = std::process::Command::new("python3").arg(oracle).arg(&cases_file).output().unwrap();
    assert!(out.status.success(), "cronsim oracle: {}", String::from_utf8_lossy(&out.stderr));
    let answers: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for ((expr, tz), answer) in lines.iter().zip(&answers) {
        let ours: Vec<String> = serde_json::from_str(
            &nats.ok(&["next", expr, "--tz", tz, "--from", start, "-n", "12", "--output", "json"]),
        )
        .unwrap();
        let theirs: Vec<String> = answer["fires"]
            .as_array()
            .unwrap_or_else(|| panic!("{expr} in {tz}: {answer}"))
            .iter()
            .map(|t| chrono::DateTime::parse_from_rfc3339(t.as_str().unwrap()).unwrap().to_utc())
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
            .collect();
        assert_eq!(ours, theirs, "{expr} in {tz}");
    }
}

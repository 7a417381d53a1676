//! `cronrun trigger JOB --input JSON`: the input is checked (JSON, 64 KiB, the job's
//! `input_schema`) before anything is dispatched, kept in the run record, and handed to
//! the job: a shell job's standard input, the same on every attempt; a Wasm job's
//! `ctx.input()`.

use crate::support::*;
use cronrun::record::Status;

/// Triggers `job` with `args` after it; returns the run's key.
fn trigger_with(nats: &Nats, job: &str, args: &[&str]) -> String {
    let out = nats.ok(&[&["trigger", job, "--output", "json"], args].concat());
    serde_json::from_str::<serde_json::Value>(&out).unwrap()["run"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shell_job_reads_its_input_on_stdin_and_its_retry_reads_the_same() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let store = nats.store().await;
    apply(
        &nats,
        "[[job]]\nname = \"echo-input\"\nschedule = \"@yearly\"\nshell = \"cat; echo; exit 1\"\n\
         retries = { max = 1, backoff = \"1s\" }\n",
    );
    // Bytes that JSON escapes badly, and text that is not ASCII.
    let input = r#"{"who": "wörld", "quote": "\"hi\"", "nul": "\u0000", "tab": "\t", "n": [1, 2.5]}"#;
    let value: serde_json::Value = serde_json::from_str(input).unwrap();
    let key = trigger_with(&nats, "echo-input", &["--input", input]);
    // The retry (attempt 2) read the same input as the first attempt did.
    let record = final_record(&store, &key).await;
    assert_eq!((record.status, record.attempt), (Status::Failed, 2));
    assert_eq!(record.output, [value.to_string()], "{record:?}");
    assert_eq!(record.input.as_ref(), Some(&value));
    let shown: Vec<serde_json::Value> =
        serde_json::from_str(&nats.ok(&["runs", "echo-input", "--output", "json"])).unwrap();
    assert_eq!(shown[0]["input"], value, "`runs` shows the input");

    // From a file.
    let file = nats.dir.path().join("input.json");
    std::fs::write(&file, "\"from a file\"").unwrap();
    let key = trigger_with(&nats, "echo-input", &["--input-file", file.to_str().unwrap()]);
    let record = final_record(&store, &key).await;
    assert_eq!((record.attempt, record.output.as_slice()), (2, &["\"from a file\"".to_string()][..]));
    // From the CLI's standard input (`--input-file -`).
    let mut child = nats
        .command()
        .args(["trigger", "echo-input", "--output", "json", "--input-file", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"{\"from\": \"stdin\"}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "trigger --input-file - failed");
    let key = serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["run"].as_str().unwrap().to_string();
    let record = final_record(&store, &key).await;
    assert_eq!(record.output, [r#"{"from":"stdin"}"#.to_string()], "{record:?}");
    // No input: the job's standard input is empty.
    let key = nats.trigger("echo-input");
    let record = final_record(&store, &key).await;
    assert_eq!((record.attempt, record.output.as_slice(), record.input.as_ref()), (2, &[String::new()][..], None));
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_inputs_and_schemas_are_refused_in_one_line_and_nothing_is_dispatched() {
    let nats = Nats::start().await;
    let job = "[[job]]\nname = \"report\"\nschedule = \"@yearly\"\nshell = \"cat\"\n\
               input_schema = { type = \"object\", required = [\"date\"], properties = { date = { type = \"string\", \
               pattern = '^\\d{4}-\\d{2}-\\d{2}$' } } }\n";
    apply(&nats, job);
    let big = format!("\"{}\"", "x".repeat(70_000));
    let missing = nats.dir.path().join("missing.json");
    let cases: [(Vec<&str>, &str); 6] = [
        (vec!["--input", "{}"], "\"date\" is a required property"),
        (vec!["--input", r#"{"date": "tomorrow"}"#], "at /date"),
        (vec!["--input", "nope"], "--input: not JSON"),
        (vec!["--input", &big], "over the 65536-byte limit"),
        (vec![], "has an input_schema: give --input"),
        (vec!["--input-file", missing.to_str().unwrap()], "cannot read it"),
    ];
    for (args, needle) in cases {
        let err = nats.fails(&[&["trigger", "report"], args.as_slice()].concat());
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let runs: Vec<serde_json::Value> = serde_json::from_str(&nats.ok(&["runs", "report", "--output", "json"])).unwrap();
    assert!(runs.is_empty(), "a refused input dispatched a run: {runs:?}");

    // A schema that is not one, refused at apply.
    let file = nats.dir.path().join("bad.toml");
    for (schema, needle) in [
        ("input_schema = { type = \"no-such-type\" }", "input_schema is not a JSON Schema"),
        ("input_schema = \"object\"", "must be a JSON Schema object"),
    ] {
        std::fs::write(&file, format!("[[job]]\nname = \"bad\"\nschedule = \"@daily\"\nshell = \"true\"\n{schema}\n"))
            .unwrap();
        let err = nats.fails(&["apply", "-f", file.to_str().unwrap()]);
        assert!(err.contains(needle), "{schema}: {err}");
    }
    nats.fails(&["get", "bad"]);

    // A good input runs.
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let key = trigger_with(&nats, "report", &["--input", r#"{"date": "2026-11-01"}"#]);
    let record = final_record(&nats.store().await, &key).await;
    assert_eq!(
        (record.status, record.output.as_slice()),
        (Status::Succeeded, &[r#"{"date":"2026-11-01"}"#.to_string()][..])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wasm_job_reads_its_input_with_the_sdk() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let hello = plugin("hello").display().to_string();
    nats.ok(&["deploy", &hello, "--name", "hello"]);
    let key = trigger_with(&nats, "hello", &["--input", r#"{"to": "wasm"}"#]);
    let record = final_record(&nats.store().await, &key).await;
    assert_eq!(record.status, Status::Succeeded, "{record:?}");
    assert!(record.output.iter().any(|l| l == r#"input: {"to":"wasm"}"#), "{:?}", record.output);
    // Without one, the guest sees none.
    let key = nats.trigger("hello");
    let record = final_record(&nats.store().await, &key).await;
    assert!(!record.output.iter().any(|l| l.starts_with("input:")), "{:?}", record.output);
}

//! Secrets (`cronrun secret set|ls|rm`, `{ secret = "NAME" }` in a shell job's `env`, a
//! Wasm job's `config`, a webhook's URL and headers) against a real nats-server with the
//! authorization `cronrun auth init` writes: set from stdin or a file, listed by name
//! only; read by the runner at each run and masked in everything the run says; never in a
//! spec, record, event or log; unreachable to a viewer by every route, and readable by
//! runners and schedulers one name at a time only.

use std::io::Write;
use std::process::{Output, Stdio};
use std::time::Duration;

use futures::StreamExt;

use crate::support::*;
use cronrun::record::Status;

/// `cronrun secret set NAME [args]` as `id`, with `stdin` as its standard input.
fn secret_set_as(nats: &Nats, id: &str, name: &str, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = nats
        .command()
        .args(["secret", "set", name])
        .args(args)
        .env("CRONRUN_CREDS", nats.identity(id))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A refusal before the value is read closes stdin: what it did not take is no error.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}

/// Sets secret `name` to `value` from stdin as the admin, expecting success.
fn set_secret(nats: &Nats, name: &str, value: &str) {
    let out = secret_set_as(nats, "admin", name, &[], value.as_bytes());
    assert!(out.status.success(), "secret set {name}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The one line a refused command printed.
fn one_line(out: &Output, what: &str) -> String {
    assert!(!out.status.success(), "{what} should have failed");
    let err = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
    assert_eq!(err.lines().count(), 1, "{what}: one line expected, got: {err}");
    err
}

/// Where any of `values` is stored in NATS outside the secrets bucket: every message of
/// every other stream (specs and their history, records, events, output, leases), its
/// payload and its headers.
async fn stored_outside_the_secrets_bucket(store: &cronrun::store::Store, values: &[&str]) -> Vec<String> {
    let names: Vec<String> = store.js.stream_names().map(|n| n.unwrap()).collect().await;
    let mut found = Vec::new();
    for name in names.into_iter().filter(|n| n != "KV_cronrun_secrets") {
        let mut stream = store.js.get_stream(&name).await.unwrap();
        let state = stream.info().await.unwrap().state.clone();
        for seq in state.first_sequence..=state.last_sequence {
            let Ok(message) = stream.get_raw_message(seq).await else { continue };
            let headers: Vec<String> = message.headers.iter().map(|(k, v)| format!("{k:?}: {v:?}")).collect();
            let text = format!("{} {}", String::from_utf8_lossy(&message.payload), headers.join(" "));
            for value in values.iter().filter(|v| text.contains(**v)) {
                found.push(format!("{value} in {name} #{seq} ({})", message.subject));
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_are_set_from_stdin_or_a_file_listed_by_name_only_and_removed() {
    let nats = Nats::start().await;
    let store = nats.store().await;
    // Stdin loses exactly one trailing newline (what `echo` adds); a file is taken as it is.
    set_secret(&nats, "from-stdin", "stdin-v4lue\n");
    set_secret(&nats, "two-newlines", "kept\n\n");
    let pem = "-----BEGIN KEY-----\nMIIEk3y\n-----END KEY-----\n";
    let file = nats.dir.path().join("key.pem");
    std::fs::write(&file, pem).unwrap();
    nats.ok(&["secret", "set", "from-file", "--file", file.to_str().unwrap()]);
    let stored = |name: &'static str| {
        let store = store.clone();
        async move { store.secrets.get(name).await.unwrap() }
    };
    assert_eq!(stored("from-stdin").await.as_deref(), Some("stdin-v4lue"));
    assert_eq!(stored("two-newlines").await.as_deref(), Some("kept\n"));
    assert_eq!(stored("from-file").await.as_deref(), Some(pem));

    // Listed by name, when and by whom; never a value.
    let listed = nats.ok(&["secret", "ls"]);
    for name in ["from-stdin", "two-newlines", "from-file"] {
        assert!(listed.contains(name), "{listed}");
    }
    assert!(listed.contains("admin U"), "who set it: {listed}");
    let json: Vec<serde_json::Value> = serde_json::from_str(&nats.ok(&["secret", "ls", "--output", "json"])).unwrap();
    assert_eq!(json.len(), 3, "{json:?}");
    for entry in &json {
        let mut keys: Vec<&String> = entry.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["by", "name", "updated"], "{entry}");
    }
    for value in ["stdin-v4lue", "kept", "MIIEk3y"] {
        assert!(!listed.contains(value) && !json.iter().any(|e| e.to_string().contains(value)), "{value} listed");
    }

    nats.ok(&["secret", "rm", "from-stdin"]);
    assert_eq!(stored("from-stdin").await, None);
    assert!(!nats.ok(&["secret", "ls"]).contains("from-stdin"));
    let err = nats.fails(&["secret", "rm", "from-stdin"]);
    assert!(err.contains("no secret from-stdin") && err.contains("cronrun secret ls"), "{err}");

    // A viewer neither lists nor sets secrets: one line each, nothing written.
    let viewer_ls = nats.command().args(["secret", "ls"]).env("CRONRUN_CREDS", nats.identity("viewer")).output();
    let err = one_line(&viewer_ls.unwrap(), "secret ls as the viewer");
    assert!(err.contains("NATS refused it"), "{err}");
    let err = one_line(&secret_set_as(&nats, "viewer", "planted", &[], b"x-value"), "secret set as the viewer");
    assert!(err.contains("NATS refused it"), "{err}");
    assert_eq!(stored("planted").await, None);
}

/// (name): each refused with one line naming the characters allowed, nothing written;
/// values over 64 KiB, empty, not UTF-8 or holding NUL refused likewise; 64 KiB exactly
/// is taken; removing what is not there is an error.
#[tokio::test(flavor = "multi_thread")]
async fn bad_names_and_values_are_refused_with_one_line_and_nothing_is_written() {
    let nats = Nats::start().await;
    let store = nats.store().await;
    let file = nats.dir.path().join("value");
    std::fs::write(&file, "a-good-value").unwrap();
    let too_long = "n".repeat(65);
    for name in ["a*", "a>", "a.b", "a b", "", too_long.as_str(), "$KV", "a/b"] {
        let out = nats.cli(&["secret", "set", name, "--file", file.to_str().unwrap()]);
        let err = one_line(&out, &format!("secret set {name:?}"));
        assert!(err.contains("A-Z a-z 0-9 _ -") && err.contains("secret name"), "{name:?}: {err}");
        let err = one_line(&nats.cli(&["secret", "rm", name]), &format!("secret rm {name:?}"));
        assert!(err.contains("A-Z a-z 0-9 _ -"), "{name:?}: {err}");
    }
    let limit = 64 * 1024;
    let cases: [(&str, Vec<u8>, &str); 5] = [
        ("file", vec![b'x'; limit + 1], "over the limit of 65536"),
        ("stdin", [vec![b'x'; limit + 1], b"\n".to_vec()].concat(), "over the limit of 65536"),
        ("stdin", Vec::new(), "the value is empty"),
        ("file", vec![0xff, 0xfe, 0x00], "not UTF-8"),
        ("file", b"a\0b-value".to_vec(), "NUL"),
    ];
    for (from, bytes, words) in cases {
        let out = match from {
            "file" => {
                std::fs::write(&file, &bytes).unwrap();
                secret_set_as(&nats, "admin", "bad", &["--file", file.to_str().unwrap()], b"")
            }
            _ => secret_set_as(&nats, "admin", "bad", &[], &bytes),
        };
        let err = one_line(&out, &format!("{} bytes from {from}", bytes.len()));
        assert!(err.contains("secret bad: ") && err.contains(words), "{} bytes from {from}: {err}", bytes.len());
    }
    assert_eq!(store.secrets.get("bad").await.unwrap(), None, "nothing written");
    // The limit itself is taken, by the CLI and the bucket.
    std::fs::write(&file, vec![b'y'; limit]).unwrap();
    nats.ok(&["secret", "set", "largest", "--file", file.to_str().unwrap()]);
    assert_eq!(store.secrets.get("largest").await.unwrap().map(|v| v.len()), Some(limit));
    let err = nats.fails(&["secret", "rm", "never-set"]);
    assert!(err.contains("no secret never-set"), "{err}");
    let names: Vec<String> = store.secrets.list().await.unwrap().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["largest"]);
}

/// The shell job of the tests: it records the value it was given (its own effect), and
/// prints it on stdout and stderr, where it must arrive masked.
fn token_job(dir: &str) -> String {
    format!(
        "[[job]]\nname = \"secretive\"\nschedule = \"@yearly\"\n\
         shell = {{ command = \"echo \\\"$TOKEN\\\" >> {dir}/seen; echo token=$TOKEN; echo err=$TOKEN >&2; echo plain=$PLAIN\", \
         env = {{ TOKEN = {{ secret = \"tok\" }}, PLAIN = \"p1ain\" }} }}\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shell_job_gets_its_secret_in_env_masked_in_all_it_says_and_a_new_value_at_its_next_run() {
    let nats = Nats::start().await;
    // The layout first: a runner alone waits for it.
    let store = nats.store().await;
    let runner = nats.agent("r", "roles = [\"runner\"]");
    let (dashboard, port, token) = dashboard_agent(&nats);
    ready(&runner).await;
    ready(&dashboard).await;
    let dir = nats.dir.path().display().to_string();
    set_secret(&nats, "tok", "first-s3cret");
    apply(&nats, &token_job(&dir));
    let client = nats.client().await;
    let mut live = client.subscribe("cronrun.logs.secretive.>").await.unwrap();
    client.flush().await.unwrap();

    let first_key = nats.trigger("secretive");
    let first = final_record(&store, &first_key).await;
    assert_eq!(first.status, Status::Succeeded, "{first:?}");
    // Rotation: the next run reads the value set since.
    set_secret(&nats, "tok", "second-s3cret");
    let second = final_record(&store, &nats.trigger("secretive")).await;
    assert_eq!(second.status, Status::Succeeded, "{second:?}");
    let seen = std::fs::read_to_string(nats.dir.path().join("seen")).unwrap();
    assert_eq!(seen.lines().collect::<Vec<_>>(), ["first-s3cret", "second-s3cret"]);

    // The record's output: masked on stdout and stderr, the rest as printed.
    for record in [&first, &second] {
        let mut output = record.output.clone();
        output.sort();
        assert_eq!(output, ["err=***", "plain=p1ain", "token=***"], "{record:?}");
    }
    // The live log on CRONRUN_LOGS, as `nats sub` and `cronrun logs -f` see it.
    let mut lines = Vec::new();
    let mut ends = 0;
    while ends < 2 {
        let message = tokio::time::timeout(Duration::from_secs(10), live.next()).await.unwrap().unwrap();
        // A message may carry several lines, the end a run's last ones.
        lines.extend(String::from_utf8_lossy(&message.payload).lines().map(String::from));
        ends += usize::from(message.headers.as_ref().and_then(|h| h.get("Cronrun-Eof")).is_some());
    }
    assert_eq!(lines.iter().filter(|l| l.as_str() == "token=***").count(), 2, "{lines:?}");
    assert_eq!(lines.iter().filter(|l| l.as_str() == "err=***").count(), 2, "{lines:?}");
    let logs = nats.ok(&["logs", &first_key]);
    assert!(logs.contains("token=***"), "{logs}");

    // Nowhere but in the secrets bucket: not in what the CLI shows of the job, its
    // history, its runs and events, nor in any stream, nor in the agent's log.
    let values = ["first-s3cret", "second-s3cret"];
    let shown = [
        nats.ok(&["get", "secretive"]),
        nats.ok(&["get", "secretive", "--output", "json"]),
        nats.ok(&["get", "secretive", "--history"]),
        nats.ok(&["runs", "secretive", "--output", "json"]),
        nats.ok(&["logs", &first_key]),
    ];
    for text in &shown {
        assert!(!values.iter().any(|v| text.contains(v)), "a value is shown: {text}");
    }
    let spec: serde_json::Value = serde_json::from_str(&shown[1]).unwrap();
    assert_eq!(spec["spec"]["shell"]["env"]["TOKEN"], serde_json::json!({ "secret": "tok" }));
    assert!(shown[0].contains("\"secret\": \"tok\""), "get shows the reference: {}", shown[0]);
    assert_eq!(stored_outside_the_secrets_bucket(&store, &values).await, Vec::<String>::new());
    // The dashboard's API: the job, the run and its output, as its pages read them.
    let session = format!("Cookie: {}", login_cookie(port, &token));
    let run_id = first_key.split_once('.').unwrap().1;
    let pages = ["/api/jobs/secretive".to_string(), format!("/api/runs/secretive/{run_id}")];
    let pages = pages.into_iter().chain([format!("/api/runs/secretive/{run_id}/output")]);
    let bodies: Vec<String> = pages
        .map(|path| {
            let (code, body) = http_request(port, "GET", &path, &[&session], "");
            assert_eq!(code, 200, "{path}: {body}");
            assert!(!values.iter().any(|v| body.contains(v)), "{path} shows a value: {body}");
            body
        })
        .collect();
    assert!(bodies[0].contains(r#"{"secret":"tok"}"#), "the dashboard shows the reference: {}", bodies[0]);
    assert!(bodies[2].contains("token=***"), "{}", bodies[2]);
    for agent in [&runner, &dashboard] {
        let log = agent.log();
        assert!(!values.iter().any(|v| log.contains(v)), "a value is in the log of agent {}", agent.name);
    }
}

/// A scheduler-only agent serving the dashboard (which reads as the viewer): its port and
/// login token.
fn dashboard_agent(nats: &Nats) -> (Agent, u16, String) {
    let (port, token) = (free_port(), "secrets-token-0123456789abcdef".to_string());
    let token_file = nats.dir.path().join("d.token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let http = format!(
        "[http]\nlisten = \"127.0.0.1:{port}\"\ntoken_file = {:?}\nviewer_creds = {:?}\n",
        token_file.display().to_string(),
        nats.identity("viewer")
    );
    let agent = nats.agent_with_env("d", &format!("roles = [\"scheduler\"]\n{}{http}", test_config("d")), &[]);
    (agent, port, token)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_naming_a_missing_secret_is_refused_at_apply_and_a_run_whose_secret_is_gone_fails_naming_it() {
    let nats = Nats::start().await;
    // The layout first: a runner alone waits for it.
    let store = nats.store().await;
    let runner = nats.agent("r", "roles = [\"runner\"]");
    ready(&runner).await;
    let dir = nats.dir.path().display().to_string();
    // Refused at apply: a typo fails there, not at every run. Nothing is written.
    let naming = |secret: &str| {
        format!(
            "[[job]]\nname = \"needs-{secret}\"\nschedule = \"@yearly\"\n\
             shell = {{ command = \"touch {dir}/ran-{secret}\", env = {{ KEY = {{ secret = \"{secret}\" }} }} }}\n"
        )
    };
    let err = refused_at_apply(&nats, &naming("nope"));
    assert!(
        err.contains("job needs-nope names secret nope, which does not exist")
            && err.contains("`cronrun secret set nope`"),
        "{err}"
    );
    assert!(store.jobs.get("needs-nope").await.unwrap().is_none());

    // Removed after the job was applied: the run fails with one line, and its command
    // never runs (no empty value instead).
    set_secret(&nats, "gone", "soon-g0ne");
    apply(&nats, &naming("gone"));
    let removed = nats.cli(&["secret", "rm", "gone"]);
    assert!(removed.status.success());
    let warned = String::from_utf8_lossy(&removed.stderr);
    assert!(warned.contains("needs-gone still name secret gone"), "{warned}");
    let run = final_record(&store, &nats.trigger("needs-gone")).await;
    assert_eq!(run.status, Status::Failed, "{run:?}");
    assert_eq!(run.error.as_deref(), Some("secret gone does not exist: set it with `cronrun secret set gone`"));
    assert!(!nats.dir.path().join("ran-gone").exists(), "the command ran without its secret");
}

/// What a client holding identity `id` gets for a request on `subject` with `body`: the
/// answer, if one came, and whether the server refused the publish.
async fn ask(nats: &Nats, id: &str, subject: &str, body: &str) -> (Option<async_nats::Message>, bool) {
    let (client, mut errors) = nats.client_as(id).await;
    let inbox = client.new_inbox();
    let mut answers = client.subscribe(inbox.clone()).await.unwrap();
    client.publish_with_reply(subject.to_string(), inbox, body.to_string().into()).await.unwrap();
    client.flush().await.unwrap();
    let refused = refused(&mut errors, ("Publish", subject), Duration::from_secs(2)).await;
    let wait = if refused { Duration::from_millis(300) } else { Duration::from_secs(5) };
    let answer = tokio::time::timeout(wait, answers.next()).await.ok().flatten();
    (answer, refused)
}

/// Whether identity `id` may subscribe to `subject` (the server refuses it at once).
async fn may_subscribe(nats: &Nats, id: &str, subject: &str) -> bool {
    let (client, mut errors) = nats.client_as(id).await;
    std::mem::forget(client.subscribe(subject.to_string()).await.unwrap());
    client.flush().await.unwrap();
    !refused(&mut errors, ("Subscription", subject), Duration::from_secs(2)).await
}

/// A viewer tries every route to the secrets bucket (stream info, both direct gets, both
/// message gets, an ordered consumer by both forms of its creation, a subscription to the
/// keys' subjects, a write) and each is refused by the server. Runners and schedulers read
/// a secret by name (their one route: a direct get of the key's last value) and nothing
/// more: no message get, no consumer, no subscription, no write.
#[tokio::test(flavor = "multi_thread")]
async fn the_viewer_has_no_route_to_the_secrets_and_runners_and_schedulers_read_one_by_name_only() {
    let nats = Nats::start().await;
    let store = nats.store().await;
    set_secret(&nats, "tok", "hidden-v4lue");
    let stream = "KV_cronrun_secrets";
    let by_name = "$JS.API.DIRECT.GET.KV_cronrun_secrets.$KV.cronrun_secrets.tok";
    let ordered = serde_json::json!({
        "stream_name": stream,
        "config": {
            "deliver_subject": "_INBOX.x", "deliver_policy": "last_per_subject", "ack_policy": "none",
            "filter_subject": "$KV.cronrun_secrets.>", "mem_storage": true, "num_replicas": 1, "flow_control": true,
            "idle_heartbeat": 5_000_000_000u64,
        }
    })
    .to_string();
    let last = r#"{"last_by_subj":"$KV.cronrun_secrets.tok"}"#;
    // (what it is, subject, body); every identity but the admin is refused each.
    let whole_bucket: Vec<(&str, String, String)> = vec![
        ("message get by subject", format!("$JS.API.STREAM.MSG.GET.{stream}"), last.into()),
        ("message get by sequence", format!("$JS.API.STREAM.MSG.GET.{stream}"), r#"{"seq":1}"#.into()),
        ("direct get by sequence", format!("$JS.API.DIRECT.GET.{stream}"), r#"{"seq":1}"#.into()),
        ("direct get by body", format!("$JS.API.DIRECT.GET.{stream}"), last.into()),
        ("an ordered consumer", format!("$JS.API.CONSUMER.CREATE.{stream}"), ordered.clone()),
        (
            "a named consumer of every key",
            format!("$JS.API.CONSUMER.CREATE.{stream}.oc1.$KV.cronrun_secrets.>"),
            ordered.clone(),
        ),
        ("a write", "$KV.cronrun_secrets.tok".into(), "planted".into()),
        ("a purge of the stream", format!("$JS.API.STREAM.PURGE.{stream}"), "{}".into()),
    ];
    let viewer_only: Vec<(&str, String, String)> = vec![
        ("stream info with subjects", format!("$JS.API.STREAM.INFO.{stream}"), r#"{"subjects_filter":">"}"#.into()),
        ("a direct get by name", by_name.into(), String::new()),
    ];
    let mut tries = Vec::new();
    for id in ["viewer", "runner", "scheduler", "agent"] {
        for (what, subject, body) in whole_bucket.iter().chain(if id == "viewer" { &viewer_only[..] } else { &[] }) {
            tries.push((id, *what, subject.clone(), body.clone()));
        }
    }
    let nats = &nats;
    let results = futures::future::join_all(tries.iter().map(|(id, what, subject, body)| async move {
        let (answer, refused) = ask(nats, id, subject, body).await;
        (!refused || answer.is_some()).then(|| format!("{id}: {what} ({subject}) was not refused: {answer:?}"))
    }))
    .await;
    let allowed: Vec<String> = results.into_iter().flatten().collect();
    assert!(allowed.is_empty(), "routes to the secrets not refused:\n{}", allowed.join("\n"));
    for id in ["viewer", "runner", "scheduler", "agent"] {
        assert!(!may_subscribe(nats, id, "$KV.cronrun_secrets.>").await, "{id} subscribed to the secrets' writes");
    }
    // Through the client library as a program would: the viewer cannot even open it.
    let (viewer, _) = nats.client_as("viewer").await;
    let js = async_nats::jetstream::new(viewer);
    assert!(js.get_key_value("cronrun_secrets").await.is_err(), "a viewer opened the secrets bucket");

    // The route runners and schedulers have: one secret, by name.
    for id in ["runner", "scheduler", "agent"] {
        let (answer, refused) = ask(nats, id, by_name, "").await;
        assert!(!refused, "{id} is refused its direct get by name");
        assert_eq!(answer.map(|a| a.payload), Some("hidden-v4lue".into()), "{id}");
    }
    assert_eq!(store.secrets.get("tok").await.unwrap().as_deref(), Some("hidden-v4lue"), "nothing planted");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wasm_jobs_config_secret_reaches_the_guest_and_what_it_prints_is_masked() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    set_secret(&nats, "greet", "hej-s3cret");
    let plugin = plugin("hello").display().to_string();
    let args = ["deploy", &plugin, "--name", "greeter", "--schedule", "@yearly", "--config-secret", "greeting=greet"];
    nats.ok(&args);
    let spec: serde_json::Value = serde_json::from_str(&nats.ok(&["get", "greeter", "--output", "json"])).unwrap();
    assert_eq!(spec["spec"]["wasm"]["config"]["greeting"], serde_json::json!({ "secret": "greet" }));
    let record: serde_json::Value =
        serde_json::from_str(&nats.ok(&["trigger", "greeter", "--wait", "--output", "json"])).unwrap();
    assert_eq!(record["status"], "succeeded", "{record}");
    // The guest greets with the config value (`hello`'s default would say "hello"): it
    // had the secret's value, and every line says it as `***`.
    let output: Vec<&str> = record["output"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert!(output.contains(&"*** from greeter"), "{output:?}");
    assert_eq!(output.last(), Some(&"***, world"), "the guest's returned text is masked too");
    let store = nats.store().await;
    assert_eq!(stored_outside_the_secrets_bucket(&store, &["hej-s3cret"]).await, Vec::<String>::new());
    // A name that is not a secret is refused at deploy, naming it.
    let err = nats.fails(&[
        "deploy",
        &plugin,
        "--name",
        "greeter2",
        "--schedule",
        "@yearly",
        "--config-secret",
        "greeting=no-such",
    ]);
    assert!(err.contains("names secret no-such, which does not exist"), "{err}");
}

/// A scheduler with its own identity (scheduler only) resolves a webhook's URL and an
/// `Authorization` header from secrets at delivery: the receiver gets both; what is told
/// of the delivery (its event, `cronrun notifications`, the agent's log) names the URL by
/// its reference and holds neither value.
#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_url_and_header_from_secrets_reach_the_receiver_and_are_never_told() {
    let nats = Nats::start().await;
    let receiver = Receiver::start(0, 0).await;
    let tables = "[notify]\ntimeout = \"2s\"\nallow_hosts = [\"127.0.0.1\"]\n";
    let scheduler = nats.agent_with_env("s", &format!("roles = [\"scheduler\"]\n{}{tables}", test_config("s")), &[]);
    let runner = nats.agent("r", "roles = [\"runner\"]");
    for agent in [&scheduler, &runner] {
        ready(agent).await;
    }
    let url = receiver.url("/hook/t0ps3cret-path");
    set_secret(&nats, "hook-url", &url);
    set_secret(&nats, "hook-auth", "Bearer s3cr3t-auth");
    apply(
        &nats,
        "[[job]]\nname = \"breaks\"\nschedule = \"@yearly\"\nshell = \"exit 3\"\n\
         notify = [{ on = [\"failed\"], webhook = { secret = \"hook-url\" }, \
         headers = { Authorization = { secret = \"hook-auth\" }, X-Team = \"ops\" } }]\n",
    );
    nats.trigger("breaks");
    let store = nats.store().await;
    let told = eventually(Duration::from_secs(20), "the notice to be delivered", || async {
        events(&store, "breaks", "notified").await.into_iter().next()
    })
    .await;
    let received = receiver.received();
    assert_eq!(received.len(), 1, "{received:#?}");
    assert_eq!(received[0].path, "/hook/t0ps3cret-path");
    assert_eq!(received[0].header("Authorization").as_deref(), Some("Bearer s3cr3t-auth"));
    assert_eq!(received[0].header("X-Team").as_deref(), Some("ops"));
    assert_eq!(told["detail"], "failed: POST [secret hook-url]: 200 OK", "{told}");
    let listed = nats.ok(&["notifications", "breaks"]);
    assert!(listed.contains("POST [secret hook-url]: 200 OK"), "{listed}");
    let values = ["t0ps3cret-path", "s3cr3t-auth"];
    assert!(!values.iter().any(|v| listed.contains(v)), "{listed}");
    assert_eq!(stored_outside_the_secrets_bucket(&store, &values).await, Vec::<String>::new());
    let log = scheduler.log();
    assert!(!values.iter().any(|v| log.contains(v)), "a value is in the scheduler's log");
}

//! Wasm jobs against a real nats-server: `cronrun deploy` (manifest, idempotence, bad
//! inputs refused with nothing stored) and the host (`WasmRuntime`, called directly, not
//! through the runner): the example plugins, their grants, and sandbox violations.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::*;
use cronrun::record::Trigger;
use cronrun::spec::WasmSpec;
use cronrun::store::{Store, plugin_digest};
use cronrun::wasm::{JobContext, Line, Source, WasmConfig, WasmOutcome, WasmRuntime};
use futures::FutureExt;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

fn path_str(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn deploy_each_plugin_then_redeploy_changes_nothing() {
    let nats = Nats::start().await;
    let cases = [("hello", "*/10 * * * * *"), ("emit_event", "0 * * * * *"), ("health_check", "0 */5 * * * *")];
    for (name, schedule) in cases {
        let file = plugin(name);
        let out: Value = serde_json::from_str(&nats.ok(&["deploy", path_str(&file), "--output", "json"])).unwrap();
        let digest = plugin_digest(&std::fs::read(&file).unwrap());
        assert_eq!(out["plugin"], digest.as_str());
        assert_eq!(out["changed"], true);
        assert_eq!(out["plugin_stored"], true);
        let got: Value = serde_json::from_str(&nats.ok(&["get", name, "--output", "json"])).unwrap();
        assert_eq!(got["spec"]["schedule"], schedule, "{got}");
        assert_eq!(got["spec"]["wasm"]["plugin"], digest.as_str());

        let again = nats.ok(&["deploy", path_str(&file)]);
        assert!(again.starts_with(&format!("unchanged {name}")), "{again}");
        let again: Value = serde_json::from_str(&nats.ok(&["deploy", path_str(&file), "--output", "json"])).unwrap();
        assert_eq!(
            (again["changed"].clone(), again["plugin_stored"].clone()),
            (Value::Bool(false), Value::Bool(false))
        );
        assert_eq!(again["revision"], out["revision"]);
    }
    // Flags override the manifest; the plugin is not stored twice.
    let hello = plugin("hello");
    let out: Value = serde_json::from_str(&nats.ok(&[
        "deploy",
        path_str(&hello),
        "--name",
        "greeter",
        "--schedule",
        "@hourly",
        "--tz",
        "Europe/Berlin",
        "--config",
        "greeting=moin",
        "--allow-publish",
        "greetings.>",
        "--output",
        "json",
    ]))
    .unwrap();
    assert_eq!((out["changed"].clone(), out["plugin_stored"].clone()), (Value::Bool(true), Value::Bool(false)));
    let got: Value = serde_json::from_str(&nats.ok(&["get", "greeter", "--output", "json"])).unwrap();
    assert_eq!(got["spec"]["schedule"], "@hourly");
    assert_eq!(got["spec"]["timezone"], "Europe/Berlin");
    assert_eq!(got["spec"]["wasm"]["config"]["greeting"], "moin");
    assert_eq!(got["spec"]["wasm"]["allow_publish"][0], "greetings.>");
    // A new version under the same name: one spec write pointing at the new digest.
    let emit = plugin("emit_event");
    let swapped: Value =
        serde_json::from_str(&nats.ok(&["deploy", path_str(&emit), "--name", "greeter", "--output", "json"])).unwrap();
    assert_eq!(swapped["changed"], true);
    assert!(swapped["revision"].as_u64() > out["revision"].as_u64());
    let got: Value = serde_json::from_str(&nats.ok(&["get", "greeter", "--output", "json"])).unwrap();
    assert_eq!(got["spec"]["wasm"]["plugin"], plugin_digest(&std::fs::read(&emit).unwrap()).as_str());
    assert_eq!(got["spec"]["schedule"], "0 * * * * *");
}

/// A component (version 0x0d, layer 1) nesting a core module whose only content is a
/// `cronrun-manifest` custom section: a manifest, but no `run` export.
fn component_without_run() -> Vec<u8> {
    let json = br#"{"schedule":"@hourly"}"#;
    let name = b"cronrun-manifest";
    let mut custom = vec![name.len() as u8];
    custom.extend_from_slice(name);
    custom.extend_from_slice(json);
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    module.push(0);
    module.push(custom.len() as u8);
    module.extend_from_slice(&custom);
    let mut component = b"\0asm\x0d\0\x01\0".to_vec();
    component.push(1); // core module section
    component.push(module.len() as u8);
    component.extend_from_slice(&module);
    component
}

#[tokio::test(flavor = "multi_thread")]
async fn deploy_refuses_bad_inputs_and_stores_nothing() {
    let nats = Nats::start().await;
    let dir = nats.dir.path();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let cases = [
        (write("notes.wasm", b"just text\n"), "not a WebAssembly file"),
        (write("core.wasm", b"\0asm\x01\0\0\0"), "core wasm module, not a component"),
        (write("bare.wasm", b"\0asm\x0d\0\x01\0"), "no cronrun-manifest section"),
        (write("other.wasm", &component_without_run()), "is not a cronrun job"),
    ];
    let store = nats.store().await;
    for (file, expected) in &cases {
        let err = nats.fails(&["deploy", path_str(file)]);
        assert!(err.contains(expected), "{}: {err}", file.display());
        assert!(!store.has_plugin(&plugin_digest(&std::fs::read(file).unwrap())).await.unwrap());
    }
    let hello = plugin("hello");
    let err = nats.fails(&["deploy", path_str(&hello), "--schedule", "61 * * * *"]);
    assert!(err.contains("schedule"), "{err}");
    let err = nats.fails(&["deploy", path_str(&hello), "--name", "bad name"]);
    assert!(err.contains("A-Z a-z 0-9 _ -"), "{err}");
    assert!(!store.has_plugin(&plugin_digest(&std::fs::read(&hello).unwrap())).await.unwrap());
    assert!(store.list_jobs().await.unwrap().is_empty());
}

struct Host {
    rt: WasmRuntime,
    store: Store,
    _cache: tempfile::TempDir,
}

async fn host(nats: &Nats, config: WasmConfig) -> Host {
    let cache = tempfile::tempdir().unwrap();
    let store = nats.store().await;
    let config = WasmConfig { cache_dir: Some(cache.path().to_path_buf()), ..config };
    Host { rt: store.wasm_host(config).unwrap(), store, _cache: cache }
}

fn spec(host: &Host, name: &str) -> WasmSpec {
    let _ = host;
    WasmSpec { plugin: plugin_digest(&std::fs::read(plugin(name)).unwrap()), ..WasmSpec::default() }
}

impl Host {
    async fn run(&self, job: &str, spec: &WasmSpec, timeout: Option<Duration>) -> (WasmOutcome, Vec<Line>) {
        self.run_with(job, spec, timeout, CancellationToken::new(), None).await
    }

    async fn run_with(
        &self,
        job: &str,
        spec: &WasmSpec,
        timeout: Option<Duration>,
        cancel: CancellationToken,
        mut first_line: Option<oneshot::Sender<()>>,
    ) -> (WasmOutcome, Vec<Line>) {
        let name = std::fs::read_dir(plugins())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.extension().is_some_and(|e| e == "wasm") && plugin_digest(&std::fs::read(p).unwrap()) == spec.plugin
            })
            .unwrap();
        self.store.put_plugin(&std::fs::read(name).unwrap()).await.unwrap();
        let prepared = self.rt.prepare(job, "default", spec).await.unwrap();
        let (tx, mut rx) = mpsc::channel(1000);
        let ctx = JobContext {
            job: job.into(),
            run_id: "20261121T193000Z".into(),
            scheduled_at: "2026-11-21T19:30:00.000Z".into(),
            attempt: 1,
            trigger: Trigger::Manual,
            input: None,
            // Plain values: no secret to resolve.
            config: spec.resolved_config(&Default::default()).unwrap(),
            traceparent: None,
        };
        // On its own task, as the runner does: the run's future is Send + 'static.
        let run = tokio::spawn(prepared.run(ctx, timeout, tx, cancel));
        let mut lines = Vec::new();
        while let Some(l) = rx.recv().await {
            if let Some(said) = first_line.take() {
                let _ = said.send(());
            }
            lines.push(l);
        }
        (run.await.unwrap(), lines)
    }
}

fn texts(lines: &[Line]) -> Vec<&str> {
    lines.iter().map(|l| l.text.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn hello_logs_and_returns_its_message() {
    let nats = Nats::start().await;
    let h = host(&nats, WasmConfig::default()).await;
    let mut s = spec(&h, "hello");
    s.config = BTreeMap::from([("greeting".to_string(), "hi".into())]);
    let (outcome, lines) = h.run("hello", &s, Some(Duration::from_secs(5))).await;
    assert_eq!(outcome, WasmOutcome::Succeeded(Some("hi, world".into())));
    let t = texts(&lines);
    assert!(t.contains(&"hi from hello"), "{t:?}");
    assert!(
        t.contains(&"run 20261121T193000Z (attempt 1, trigger manual) scheduled at 2026-11-21T19:30:00.000Z"),
        "{t:?}"
    );
    assert!(t.contains(&"[debug] config keys: greeting"), "{t:?}");
    assert!(lines.iter().all(|l| l.source == Source::Stdout));
    // Compiled once, kept on disk by digest and engine fingerprint.
    let cached: Vec<_> = std::fs::read_dir(h._cache.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(cached.iter().any(|n| n.to_string_lossy().starts_with(&s.plugin)), "{cached:?}");
    // A second runtime (a restarted agent) loads it from disk and runs it the same.
    let again =
        h.store.wasm_host(WasmConfig { cache_dir: Some(h._cache.path().into()), ..WasmConfig::default() }).unwrap();
    let h2 = Host { rt: again, store: h.store.clone(), _cache: tempfile::tempdir().unwrap() };
    assert_eq!(h2.run("hello", &s, None).await.0, WasmOutcome::Succeeded(Some("hi, world".into())));
}

#[tokio::test(flavor = "multi_thread")]
async fn emit_event_publishes_once_to_granted_subject_only() {
    let nats = Nats::start().await;
    let h = host(&nats, WasmConfig::default()).await;
    let stream = h
        .store
        .js
        .create_stream(async_nats::jetstream::stream::Config {
            name: "EVENTS_TEST".into(),
            subjects: vec!["orders.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let mut s = spec(&h, "emit_event");
    s.allow_publish = vec!["orders.*".into()];
    s.config =
        BTreeMap::from([("subject".to_string(), "orders.tick".into()), ("payload".to_string(), "{\"n\":1}".into())]);
    // Two attempts of one fire: the stream keeps one message (Nats-Msg-Id dedup).
    for _ in 0..2 {
        let (outcome, _) = h.run("emit", &s, Some(Duration::from_secs(10))).await;
        assert!(matches!(&outcome, WasmOutcome::Succeeded(Some(m)) if m.contains("emit-1795289400")), "{outcome:?}");
    }
    let mut stream = stream;
    assert_eq!(stream.info().await.unwrap().state.messages, 1);
    let msg = stream.get_last_raw_message_by_subject("orders.tick").await.unwrap();
    let headers = msg.headers;
    assert_eq!(headers.get("Nats-Msg-Id").unwrap().as_str(), "emit-1795289400");
    let body: Value = serde_json::from_slice(&msg.payload).unwrap();
    assert_eq!(body["payload"]["n"], 1);
    assert_eq!(body["schedule_id"], "emit");

    s.config.insert("subject".into(), "billing.tick".into());
    let (outcome, _) = h.run("emit", &s, Some(Duration::from_secs(10))).await;
    assert!(
        matches!(&outcome, WasmOutcome::Failed(m) if m.starts_with("publish to billing.tick denied: not granted")),
        "{outcome:?}"
    );
    assert_eq!(stream.info().await.unwrap().state.messages, 1);
}

/// A tiny HTTP server on 127.0.0.1 answering 204 to everything; returns its port.
async fn http_server() -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let _ =
                    conn.write_all(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
                let _ = conn.shutdown().await;
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread")]
async fn health_check_reaches_granted_hosts_only_and_kv_needs_its_grant() {
    let nats = Nats::start().await;
    let h = host(&nats, WasmConfig::default()).await;
    let port = http_server().await;
    let mut s = spec(&h, "health_check");
    let url = format!("http://127.0.0.1:{port}/health");
    s.config = BTreeMap::from([("url".to_string(), url.clone().into())]);
    // An IP literal names the address: the operator meant this internal one.
    s.allow_http = vec![format!("http://127.0.0.1:{port}")];
    s.allow_kv = true;
    let timeout = Some(Duration::from_secs(20));
    let (outcome, _) = h.run("health", &s, timeout).await;
    assert_eq!(outcome, WasmOutcome::Succeeded(Some(format!("{url}: status 204 (first check)"))));
    // The status is kept in the job's KV: unchanged now, so nothing to report.
    assert_eq!(h.run("health", &s, timeout).await.0, WasmOutcome::Succeeded(None));
    let kv = h.store.js.get_key_value("cronrun_jobkv").await.unwrap();
    assert_eq!(kv.get("health.last-status").await.unwrap().unwrap().as_ref(), b"204");

    let mut no_kv = s.clone();
    no_kv.allow_kv = false;
    let (outcome, _) = h.run("health2", &no_kv, timeout).await;
    assert!(matches!(&outcome, WasmOutcome::Failed(m) if m.starts_with("kv denied: not granted")), "{outcome:?}");

    // Each entry that misses scheme, host or port, or whose name leads inside, is refused.
    let other_port = port.wrapping_add(1);
    let localhost_url = format!("http://localhost:{port}/health");
    let refused = [
        (vec!["example.com".to_string()], url.clone()),
        (vec![format!("https://127.0.0.1:{port}")], url.clone()),
        (vec![format!("http://127.0.0.1:{other_port}")], url.clone()),
        (vec!["127.0.0.1".to_string()], url.clone()),
        (vec![format!("http://localhost:{port}")], localhost_url),
    ];
    for (i, (allow_http, target)) in refused.into_iter().enumerate() {
        let mut denied = s.clone();
        denied.config = BTreeMap::from([("url".to_string(), target.clone().into())]);
        denied.allow_http = allow_http.clone();
        let (outcome, _) = h.run(&format!("denied{i}"), &denied, timeout).await;
        assert!(
            matches!(&outcome, WasmOutcome::Failed(m) if m.contains("HttpRequestDenied")),
            "{allow_http:?} -> {target}: {outcome:?}"
        );
    }
}

/// `[wasm] http_max_requests` counts per run: with 1, each run of `health_check` (one
/// request) reaches the server; with 0, the request fails in the guest with
/// `ConnectionLimitReached` and never leaves (the plugin reports the URL unreachable).
#[tokio::test(flavor = "multi_thread")]
async fn a_guest_beyond_http_max_requests_gets_connection_limit_reached_and_the_count_is_per_run() {
    let nats = Nats::start().await;
    let port = http_server().await;
    let url = format!("http://127.0.0.1:{port}/health");
    let timeout = Some(Duration::from_secs(20));
    let one = host(&nats, WasmConfig { http_max_requests: 1, ..WasmConfig::default() }).await;
    let mut s = spec(&one, "health_check");
    s.config = BTreeMap::from([("url".to_string(), url.clone().into())]);
    s.allow_http = vec![format!("http://127.0.0.1:{port}")];
    s.allow_kv = true;
    let first = one.run("limit1", &s, timeout).await.0;
    assert_eq!(first, WasmOutcome::Succeeded(Some(format!("{url}: status 204 (first check)"))));
    // A second run has its own count: the request goes out again (status unchanged).
    assert_eq!(one.run("limit1", &s, timeout).await.0, WasmOutcome::Succeeded(None));

    let none = host(&nats, WasmConfig { http_max_requests: 0, ..WasmConfig::default() }).await;
    let (outcome, lines) = none.run("limit0", &s, timeout).await;
    assert_eq!(outcome, WasmOutcome::Succeeded(Some(format!("{url}: status unreachable (first check)"))));
    assert!(lines.iter().any(|l| l.text.contains("ConnectionLimitReached")), "{:?}", texts(&lines));
}

#[tokio::test(flavor = "multi_thread")]
async fn sandbox_violations_fail_the_run_and_the_runtime_keeps_serving() {
    let nats = Nats::start().await;
    let config = WasmConfig { memory_limit: 32 << 20, ..WasmConfig::default() };
    let h = host(&nats, config).await;
    let hello = spec(&h, "hello");

    // An endless loop ends at its timeout, while another run goes on beside it.
    let spin_spec = spec(&h, "test_spin");
    let started = Instant::now();
    let (spin, other) = tokio::join!(
        h.run("spin", &spin_spec, Some(Duration::from_millis(500))),
        h.run("hello", &hello, Some(Duration::from_secs(5))),
    );
    assert_eq!(spin.0, WasmOutcome::TimedOut);
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(other.0, WasmOutcome::Succeeded(Some("hello, world".into())));

    // Cancelled without a timeout.
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        // Any moment of the endless loop will do: a run cancelled is cancelled.
        tokio::time::sleep(Duration::from_millis(300)).await;
        c.cancel();
    });
    assert_eq!(h.run_with("spin", &spec(&h, "test_spin"), None, cancel, None).await.0, WasmOutcome::Cancelled);

    let (grow, _) = h.run("grow", &spec(&h, "test_grow"), Some(Duration::from_secs(20))).await;
    assert!(
        matches!(&grow, WasmOutcome::Failed(m) if m.starts_with("memory limit exceeded") && m.contains("32 MiB")),
        "{grow:?}"
    );

    let (recurse, _) = h.run("recurse", &spec(&h, "test_recurse"), Some(Duration::from_secs(20))).await;
    assert!(matches!(&recurse, WasmOutcome::Failed(m) if m.starts_with("stack overflow")), "{recurse:?}");

    let (panic, lines) = h.run("panic", &spec(&h, "test_panic"), Some(Duration::from_secs(20))).await;
    assert!(
        matches!(&panic, WasmOutcome::Failed(m) if m.starts_with("the job panicked: deliberate panic in panic")),
        "{panic:?}"
    );
    assert!(lines.iter().any(|l| l.source == Source::Stderr && l.text.contains("panicked at")), "{:?}", texts(&lines));
    // Plain stdout and stderr lines reach the output too, stderr marked as such.
    let plain: Vec<_> =
        lines.iter().filter(|l| l.text.starts_with("plain ")).map(|l| (l.source, l.text.as_str())).collect();
    assert_eq!(
        plain,
        [(Source::Stdout, "plain stdout from panic"), (Source::Stderr, "plain stderr from panic")],
        "{:?}",
        texts(&lines)
    );

    // After all of that, the same runtime runs a good job normally.
    assert_eq!(
        h.run("hello", &hello, Some(Duration::from_secs(5))).await.0,
        WasmOutcome::Succeeded(Some("hello, world".into()))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_beyond_max_instances_wait_for_an_instance_within_their_timeout() {
    let nats = Nats::start().await;
    let h = host(&nats, WasmConfig { max_instances: 1, ..WasmConfig::default() }).await;
    let (spin, hello) = (spec(&h, "test_spin"), spec(&h, "hello"));
    // Both compiled and stored before timing anything: the spinning guest must take the
    // one instance at once, not after compiling.
    h.run("hello", &hello, None).await;
    h.run("spin", &spin, Some(Duration::from_millis(50))).await;

    // The one instance is held by a guest that spins until its 3 s timeout (the others
    // start once it has said so from inside): a run that may wait 10 s gets the instance
    // then and succeeds; one that may wait 300 ms times out waiting.
    let started = Instant::now();
    let (said, spinning_said) = oneshot::channel();
    let spinning_said = spinning_said.shared();
    let spinning = h.run_with("spin", &spin, Some(Duration::from_secs(3)), CancellationToken::new(), Some(said));
    let waiting = async {
        spinning_said.clone().await.unwrap();
        let waited = h.run("hello", &hello, Some(Duration::from_secs(10))).await.0;
        (waited, started.elapsed())
    };
    let impatient = async {
        spinning_said.clone().await.unwrap();
        h.run("hello", &hello, Some(Duration::from_millis(300))).await.0
    };
    let ((spun, _), (waited, waited_until), impatient) = tokio::join!(spinning, waiting, impatient);
    assert_eq!(spun, WasmOutcome::TimedOut);
    assert_eq!(impatient, WasmOutcome::TimedOut);
    assert_eq!(waited, WasmOutcome::Succeeded(Some("hello, world".into())));
    assert!(waited_until >= Duration::from_secs(3), "ran before the spinning guest let go: {waited_until:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_compiled_file_others_could_have_written_is_compiled_again_never_loaded() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let nats = Nats::start().await;
    let h = host(&nats, WasmConfig::default()).await;
    let hello = spec(&h, "hello");
    let ok = WasmOutcome::Succeeded(Some("hello, world".into()));
    assert_eq!(h.run("hello", &hello, None).await.0, ok);
    let dir = h._cache.path().to_path_buf();
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .unwrap();
    let restarted = || {
        let config = WasmConfig { cache_dir: Some(dir.clone()), ..WasmConfig::default() };
        Host { rt: h.store.wasm_host(config).unwrap(), store: h.store.clone(), _cache: tempfile::tempdir().unwrap() }
    };
    let mut tampers = vec!["writable by others", "not a component"];
    if nix::unistd::geteuid().is_root() {
        tampers.push("owned by another user");
    }
    for what in tampers {
        match what {
            "writable by others" => std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap(),
            "not a component" => std::fs::write(&file, b"\x7fELF not a component").unwrap(),
            _ => nix::unistd::chown(&file, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap(),
        }
        let before = std::fs::metadata(&file).unwrap().ino();
        // A restarted agent runs the job from a fresh compile and replaces the file.
        assert_eq!(restarted().run("hello", &hello, None).await.0, ok, "{what}");
        let after = std::fs::metadata(&file).unwrap();
        assert_ne!(after.ino(), before, "{what}: the file was loaded, not replaced");
        assert_eq!((after.uid(), after.mode() & 0o777), (nix::unistd::geteuid().as_raw(), 0o600), "{what}");
    }
    // A directory others may write is not used at all: compiled code stays in memory.
    std::fs::remove_file(&file).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(restarted().run("hello", &hello, None).await.0, ok);
    assert!(!file.exists(), "compiled code was written to a directory others may write");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_jobs_kv_store_is_held_to_its_quota() {
    let nats = Nats::start().await;
    let config = WasmConfig { kv_max_keys: 25, kv_max_value_bytes: 64 << 10, ..WasmConfig::default() };
    let h = host(&nats, config).await;
    let fill = WasmSpec { allow_kv: true, ..spec(&h, "test_fill") };
    let (outcome, lines) = h.run("fill", &fill, Some(Duration::from_secs(30))).await;
    let WasmOutcome::Succeeded(Some(report)) = &outcome else { panic!("{outcome:?} {:?}", texts(&lines)) };
    assert!(report.starts_with("added 25; refused: kv set k25: the job holds 25 keys"), "{report}");
    assert!(report.contains("too big: kv set big: value of 102400 bytes is over the limit of 65536"), "{report}");
    // What it holds is its 25 keys, the overwritten one included; another job has its own.
    let kv = async_nats::jetstream::new(nats.client().await).get_key_value("cronrun_jobkv").await.unwrap();
    assert_eq!(kv.get("fill.k0").await.unwrap().unwrap().as_ref(), b"again");
    assert!(kv.get("fill.k25").await.unwrap().is_none());
    let (other, _) = h.run("other", &fill, Some(Duration::from_secs(30))).await;
    assert!(matches!(&other, WasmOutcome::Succeeded(Some(r)) if r.starts_with("added 25;")), "{other:?}");
}

/// p50, p99, max and mean of `samples`, for the bench's report.
fn summary(samples: &mut [Duration]) -> String {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    format!("p50 {:?}, p99 {:?}, max {:?}, mean {:?}", at(0.50), at(0.99), samples[samples.len() - 1], mean)
}

/// Instantiate + call of `hello` (`PreparedWasm::run` as the runner calls it), and the
/// cached `prepare` before it: each run timed, after a warm-up. Run with
/// `cargo test --release -p cronrun --test integration -- --ignored --nocapture bench_instantiate_and_call_hello`.
#[tokio::test(flavor = "multi_thread")]
#[ignore]
async fn bench_instantiate_and_call_hello() {
    let nats = Nats::start().await;
    let h = host(&nats, WasmConfig::default()).await;
    let s = spec(&h, "hello");
    h.store.put_plugin(&std::fs::read(plugin("hello")).unwrap()).await.unwrap();
    let started = Instant::now();
    h.rt.prepare("hello", "default", &s).await.unwrap();
    println!("first prepare (fetch + compile + link): {:?}", started.elapsed());
    let (warmup, n) = (200, 2000);
    let mut prepare = Vec::with_capacity(n);
    let mut run = Vec::with_capacity(n);
    for i in 0..warmup + n {
        let t = Instant::now();
        let p = h.rt.prepare("hello", "default", &s).await.unwrap();
        let prepared = t.elapsed();
        let (tx, mut rx) = mpsc::channel(100);
        let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
        let ctx = JobContext {
            job: "hello".into(),
            run_id: "r".into(),
            scheduled_at: "2026-11-21T19:30:00.000Z".into(),
            attempt: 1,
            trigger: Trigger::Manual,
            input: None,
            config: s.resolved_config(&Default::default()).unwrap(),
            traceparent: None,
        };
        let t = Instant::now();
        let outcome = p.run(ctx, Some(Duration::from_secs(5)), tx, CancellationToken::new()).await;
        let ran = t.elapsed();
        drain.await.unwrap();
        assert!(matches!(outcome, WasmOutcome::Succeeded(_)));
        if i >= warmup {
            prepare.push(prepared);
            run.push(ran);
        }
    }
    println!("instantiate + call: {} ({n} runs after {warmup} warm-up)", summary(&mut run));
    println!("cached prepare: {}", summary(&mut prepare));
}

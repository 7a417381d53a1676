//! Deployed Wasm jobs run by a real agent: scheduled from their manifest (or flags),
//! their log lines in the run's output, one event per fire from `emit-event`; a Python
//! job given its schedule by `cronrun manifest`, under the same limits.

use std::time::Duration;

use crate::support::*;
use cronrun::record::Status;

/// A built example plugin's path, as the CLI takes it.
fn plugin(name: &str) -> String {
    crate::support::plugin(name).display().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn deployed_wasm_jobs_run_on_the_agent() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let store = nats.store().await;

    // hello: its manifest schedule (every 10 s). Manual runs go to a yearly copy: with
    // overlap `skip`, one landing on a scheduled run of hello would be skipped.
    nats.ok(&["deploy", &plugin("hello"), "--name", "hello", "--config", "greeting=hej"]);
    assert!(nats.ok(&["get", "hello"]).contains("*/10 * * * * *"));
    nats.ok(&["deploy", &plugin("hello"), "--name", "greeter", "--config", "greeting=hej", "--schedule", "@yearly"]);
    let out = nats.ok(&["trigger", "greeter", "--wait", "--output", "json"]);
    let record: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(record["status"], "succeeded", "{record}");
    let output: Vec<&str> = record["output"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert!(output.iter().any(|l| l.contains("hej from greeter")), "{output:?}");
    assert_eq!(output.last(), Some(&"hej, world"));

    // emit-event every 2 s: one event per fire in a deduplicating stream.
    let js = async_nats::jetstream::new(nats.client().await);
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "DEMO".into(),
        subjects: vec!["demo.events".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    nats.ok(&[
        "deploy",
        &plugin("emit_event"),
        "--name",
        "emitter",
        "--schedule",
        "*/2 * * * * *",
        "--config",
        "subject=demo.events",
        "--config",
        "payload={\"n\":1}",
        "--allow-publish",
        "demo.>",
    ]);
    let done = eventually(Duration::from_secs(20), "three scheduled emitter runs", || async {
        let ok: Vec<_> = runs(&store, "emitter").await.into_iter().filter(|r| r.status == Status::Succeeded).collect();
        (ok.len() >= 3).then_some(ok)
    })
    .await;
    for r in &done {
        assert_eq!(r.scheduled_at.unwrap().timestamp() % 2, 0, "fires on the deployed schedule");
    }
    let mut stream = js.get_stream("DEMO").await.unwrap();
    let events = stream.info().await.unwrap().state.messages;
    let succeeded = runs(&store, "emitter").await.into_iter().filter(|r| r.status == Status::Succeeded).count() as u64;
    assert!(events >= done.len() as u64 && events <= succeeded, "{events} events for {succeeded} runs");

    // A denied publish fails the run with the host's message, and the agent goes on.
    nats.ok(&["deploy", &plugin("emit_event"), "--name", "denied", "--config", "subject=billing.tick"]);
    let out = nats.cli(&["trigger", "denied", "--wait"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("denied"), "{}", String::from_utf8_lossy(&out.stderr));
    let again = nats.ok(&["trigger", "greeter", "--wait"]);
    assert!(again.contains("succeeded"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_version_switches_while_a_run_finishes_on_the_old_one() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    // Version 1 spins until its 3 s timeout; version 2 is hello.
    nats.ok(&["deploy", &plugin("test_spin"), "--name", "switch", "--timeout", "3s"]);
    let first = nats.trigger("switch");
    let (job, run) = cronrun::record::parse_run_key(&first).unwrap();
    let store = nats.store().await;
    eventually(Duration::from_secs(10), "version 1 to be running", || async {
        (store.get_run(job, run).await.unwrap().record.status == Status::Running).then_some(())
    })
    .await;
    let v1 = nats.store().await.get_job("switch").await.unwrap().spec.unwrap().wasm.unwrap().plugin;
    // Yearly, not hello's every 10 s: a scheduled run must not overlap the manual one below.
    nats.ok(&["deploy", &plugin("hello"), "--name", "switch", "--timeout", "3s", "--schedule", "@yearly"]);
    let v2 = store.get_job("switch").await.unwrap().spec.unwrap().wasm.unwrap().plugin;
    assert_ne!(v1, v2, "the spec points at the new digest at once");
    // The run in flight ends on the version it started with.
    let ended = eventually(Duration::from_secs(15), "version 1's run to end", || async {
        Some(store.get_run(job, run).await.unwrap().record).filter(|r| r.status.is_final())
    })
    .await;
    assert_eq!(ended.status, Status::TimedOut, "{ended:?}");
    assert!(ended.output.iter().any(|l| l == "spinning"));
    // The next run is version 2.
    let out = nats.ok(&["trigger", "switch", "--wait", "--output", "json"]);
    let record: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(record["status"], "succeeded");
    assert!(record["output"].to_string().contains("hello from switch"), "{record}");
}

/// A guest publishes through the agent's own connection, so no grant may reach NATS's own
/// subjects or cronrun's: such a grant is refused at deploy with one line naming it, and
/// a spec put into KV past the CLI is refused again at the publish (else a guest could
/// write a shell job into `cronrun_jobs` and run it on every runner).
#[tokio::test(flavor = "multi_thread")]
async fn grants_that_reach_reserved_subjects_are_refused_at_deploy_and_at_publish() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    let store = nats.store().await;
    let emit = plugin("emit_event");
    for grant in [">", "$KV.>", "$JS.API.>", "*.>", "_INBOX.>", "cronrun.dispatch.*", "$SYS.>", "$O.*.x"] {
        let err = nats.fails(&["deploy", &emit, "--name", "evil", "--config", "subject=x", "--allow-publish", grant]);
        assert!(err.starts_with("error: ") && !err.trim_end().contains('\n'), "{err}");
        assert!(err.contains(&format!("grant {grant:?} could reach")), "{grant}: {err}");
    }
    for entry in ["ftp://files.example.com", "https://api.example.com/v1", "https://*.10.0.0.1", "https://x.com:0"] {
        let err = nats.fails(&["deploy", &emit, "--name", "evil", "--config", "subject=x", "--allow-http", entry]);
        assert!(err.contains("wasm.allow_http") || err.contains("allow_http entry"), "{entry}: {err}");
        assert!(err.contains("scheme://host[:port]"), "{entry}: {err}");
    }
    assert!(nats.fails(&["get", "evil"]).contains("not found"), "a refused deploy wrote the job");

    // Past the CLI: a spec with grant `>` whose guest publishes a job spec into KV.
    nats.ok(&["deploy", &emit, "--name", "fine", "--config", "subject=demo.x", "--allow-publish", "demo.>"]);
    let fine: serde_json::Value = serde_json::from_str(&nats.ok(&["get", "fine", "--output", "json"])).unwrap();
    let mut evil = fine["spec"].clone();
    evil["name"] = "evil".into();
    evil["wasm"]["allow_publish"] = serde_json::json!([">"]);
    evil["wasm"]["config"] = serde_json::json!({ "subject": "$KV.cronrun_jobs.pwned" });
    evil["retries"] = serde_json::json!({ "max": 0 });
    store.jobs.kv.put("evil", serde_json::to_vec(&evil).unwrap().into()).await.unwrap();
    let out = nats.cli(&["trigger", "evil", "--wait", "--output", "json"]);
    let record: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(record["status"], "failed", "{record}");
    assert!(record["error"].as_str().unwrap().contains("reserved"), "{record}");
    assert!(store.jobs.get("pwned").await.unwrap().is_none(), "the guest wrote a job spec");
}

/// A guest whose spec sets no timeout still ends: `[wasm] default_timeout` bounds it, so a
/// stuck guest cannot hold one of the runner's Wasm instances for ever.
#[tokio::test(flavor = "multi_thread")]
async fn a_wasm_job_without_a_timeout_gets_the_runners_default() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "wasm.default_timeout = \"2s\"");
    ready(&agent).await;
    let store = nats.store().await;
    nats.ok(&["deploy", &plugin("test_spin"), "--name", "spin"]);
    let stored: serde_json::Value = serde_json::from_str(&nats.ok(&["get", "spin", "--output", "json"])).unwrap();
    let mut spec = stored["spec"].clone();
    assert_eq!(spec["timeout"], "1s", "the manifest's timeout, removed below");
    spec.as_object_mut().unwrap().remove("timeout");
    store.jobs.kv.put("spin", serde_json::to_vec(&spec).unwrap().into()).await.unwrap();
    let started = std::time::Instant::now();
    let out = nats.cli(&["trigger", "spin", "--wait", "--output", "json"]);
    let record: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(record["status"], "timed_out", "{record}");
    assert_eq!(record["error"], "timed out after 2s", "{record}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
}

/// A runner that trusts a signing key runs only plugins signed by it: unsigned ones, ones
/// signed by another key, and a signature moved onto another plugin fail with one line;
/// with `allow_shell = false` it runs no shell job either.
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_with_trusted_keys_runs_only_plugins_signed_by_them() {
    let nats = Nats::start().await;
    let keygen = |name: &str| {
        let path = nats.dir.path().join(name).display().to_string();
        let out: serde_json::Value =
            serde_json::from_str(&nats.ok(&["auth", "keygen", &path, "--output", "json"])).unwrap();
        (path, out["public_key"].as_str().unwrap().to_string())
    };
    let ((ours, our_key), (theirs, _)) = (keygen("ours.nk"), keygen("theirs.nk"));
    assert!(nats.fails(&["auth", "keygen", &ours]).contains("never overwritten"));
    let store = nats.store().await; // the layout, which a runner alone waits for
    let agent = nats.runner_with("a", &format!("allow_shell = false\n[wasm]\ntrusted_keys = [\"{our_key}\"]"));
    ready(&agent).await;
    let hello = plugin("hello");
    nats.ok(&["deploy", &hello, "--name", "signed", "--sign", &ours]);
    nats.ok(&["deploy", &hello, "--name", "unsigned"]);
    nats.ok(&["deploy", &hello, "--name", "stranger", "--sign", &theirs]);
    // hello's signature lifted onto another plugin, past the CLI.
    let signed: serde_json::Value = serde_json::from_str(&nats.ok(&["get", "signed", "--output", "json"])).unwrap();
    let signature = signed["spec"]["wasm"]["signature"].as_str().unwrap();
    assert!(signature.starts_with(&format!("{our_key}:")), "{signature}");
    nats.ok(&["deploy", &plugin("emit_event"), "--name", "lifted", "--config", "subject=demo.x"]);
    let mut lifted: serde_json::Value =
        serde_json::from_str::<serde_json::Value>(&nats.ok(&["get", "lifted", "--output", "json"])).unwrap()["spec"]
            .clone();
    lifted["wasm"]["signature"] = signature.into();
    lifted["wasm"]["signed_at"] = signed["spec"]["wasm"]["signed_at"].clone();
    store.jobs.kv.put("lifted", serde_json::to_vec(&lifted).unwrap().into()).await.unwrap();
    // A signature as cronrun before signed_at wrote it: the digest alone.
    let mut old = signed["spec"].clone();
    let seed = std::fs::read_to_string(&ours).unwrap();
    let pair = nkeys::KeyPair::from_seed(seed.trim()).unwrap();
    let digest_only = pair.sign(old["wasm"]["plugin"].as_str().unwrap().as_bytes()).unwrap();
    use base64::Engine;
    let digest_only = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest_only);
    old["name"] = "old".into();
    old["wasm"]["signature"] = format!("{our_key}:{digest_only}").into();
    old["wasm"].as_object_mut().unwrap().remove("signed_at");
    store.jobs.kv.put("old", serde_json::to_vec(&old).unwrap().into()).await.unwrap();
    nats.ok(&["add", "shell", "--schedule", "@yearly", "--", "echo hi"]);

    for (job, status, needle) in [
        ("signed", "succeeded", "hello, world"),
        ("unsigned", "failed", "is not signed, and this runner runs only Wasm jobs signed by its [wasm] trusted_keys"),
        ("stranger", "failed", "which is not among this runner's [wasm] trusted_keys"),
        ("lifted", "failed", "does not cover this spec"),
        ("old", "failed", "sign it again with this version"),
        ("shell", "failed", "this runner runs no shell jobs ([runner] allow_shell = false)"),
    ] {
        let out = nats.cli(&["trigger", job, "--wait", "--output", "json"]);
        let record: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(record["status"], status, "{job}: {record}");
        let seen = format!("{} {}", record["output"], record["error"]);
        assert!(seen.contains(needle), "{job}: {needle:?} not in {seen}");
    }
    // A signing key others may read is refused, and nothing is written.
    let open = nats.dir.path().join("open.nk");
    std::fs::copy(&ours, &open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let err = nats.fails(&["deploy", &hello, "--name", "careless", "--sign", open.to_str().unwrap()]);
    assert!(err.contains("--sign") && err.contains("chmod 600"), "{err}");
    assert!(nats.fails(&["get", "careless"]).contains("not found"));
}

/// A signing key made by `cronrun auth keygen` in the test's directory: (its file, its
/// public key).
fn keygen(nats: &Nats, name: &str) -> (String, String) {
    let path = nats.dir.path().join(name).display().to_string();
    let out: serde_json::Value =
        serde_json::from_str(&nats.ok(&["auth", "keygen", &path, "--output", "json"])).unwrap();
    (path, out["public_key"].as_str().unwrap().to_string())
}

/// The stored spec of `job`, as JSON.
fn stored_spec(nats: &Nats, job: &str) -> serde_json::Value {
    serde_json::from_str::<serde_json::Value>(&nats.ok(&["get", job, "--output", "json"])).unwrap()["spec"].clone()
}

/// `trigger JOB --wait`: the run's status and error (empty when none). A refusal's error
/// is one line.
fn run_of(nats: &Nats, job: &str) -> (String, String) {
    let out = nats.cli(&["trigger", job, "--wait", "--output", "json"]);
    let record: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{job}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    let error = record["error"].as_str().unwrap_or_default().to_string();
    assert!(!error.contains('\n'), "{job}: one line expected: {error}");
    (record["status"].as_str().unwrap().to_string(), error)
}

/// A runner with trusted keys runs a signed deploy, and refuses the same signed spec once
/// an admin's direct write of the job spec changed its grants, its config or its pool:
/// the run fails with one line saying the signature does not cover the spec.
#[tokio::test(flavor = "multi_thread")]
async fn a_signature_covers_the_grants_config_and_pool_an_admin_cannot_change() {
    let nats = Nats::start().await;
    let (key_file, public) = keygen(&nats, "signing.nk");
    let store = nats.store().await;
    let trusting = format!("pools = [\"default\", \"gpu\"]\n[wasm]\ntrusted_keys = [\"{public}\"]");
    let agent = nats.runner_with("a", &trusting);
    ready(&agent).await;
    let hello = plugin("hello");
    for job in ["signed", "grants", "config", "pool"] {
        nats.ok(&[
            "deploy",
            &hello,
            "--name",
            job,
            "--schedule",
            "@yearly",
            "--config",
            "greeting=hej",
            "--sign",
            &key_file,
        ]);
    }
    let spec = stored_spec(&nats, "signed");
    assert!(spec["wasm"]["signature"].as_str().unwrap().starts_with(&format!("{public}:")), "{spec}");
    assert!(spec["wasm"]["signed_at"].as_str().is_some(), "{spec}");
    assert_eq!(run_of(&nats, "signed"), ("succeeded".to_string(), String::new()), "a signed deploy runs");

    // Each job's signed spec rewritten by an identity that may write job specs (the test's
    // unrestricted client, as an admin's `nats kv put` would), its signature kept.
    type Tamper = fn(&mut serde_json::Value);
    let tamper: [(&str, Tamper); 3] = [
        ("grants", |s| s["wasm"]["allow_http"] = serde_json::json!(["http://169.254.169.254"])),
        ("config", |s| s["wasm"]["config"]["greeting"] = "pwned".into()),
        ("pool", |s| s["pool"] = "gpu".into()),
    ];
    for (job, change) in tamper {
        let mut spec = stored_spec(&nats, job);
        change(&mut spec);
        store.jobs.kv.put(job, serde_json::to_vec(&spec).unwrap().into()).await.unwrap();
        let (status, error) = run_of(&nats, job);
        assert_eq!(status, "failed", "{job} changed after signing: {error}");
        assert!(
            error.contains(&format!("the signature of job {job} by {public} does not cover this spec")),
            "{job}: {error}"
        );
    }
}

/// A runner with trusted keys refuses a signed spec older than the newest it has seen for
/// the job (v1 signed, v2 signed and run, v1's spec written back): a replay, one line. The
/// newest signing time seen is kept in `signed.<job>` of the leases bucket, which the
/// admin identity may not write; deleting and re-creating the job does not reset it.
#[tokio::test(flavor = "multi_thread")]
async fn an_older_signed_spec_written_back_is_refused_as_a_replay() {
    let nats = Nats::start().await;
    let (key_file, public) = keygen(&nats, "signing.nk");
    let store = nats.store().await;
    let agent = nats.runner_with("a", &format!("[wasm]\ntrusted_keys = [\"{public}\"]"));
    ready(&agent).await;
    let hello = plugin("hello");
    let deploy = |greeting: &str| {
        let greeting = format!("greeting={greeting}");
        nats.ok(&[
            "deploy",
            &hello,
            "--name",
            "app",
            "--schedule",
            "@yearly",
            "--config",
            &greeting,
            "--sign",
            &key_file,
        ]);
        stored_spec(&nats, "app")
    };
    let v1 = deploy("v1");
    assert_eq!(run_of(&nats, "app").0, "succeeded");
    let v2 = deploy("v2");
    assert!(v2["wasm"]["signed_at"].as_str() > v1["wasm"]["signed_at"].as_str(), "{v1} {v2}");
    assert_eq!(run_of(&nats, "app").0, "succeeded", "the newer signed build runs");
    let seen = store.leases.get("signed.app").await.unwrap().expect("signed.app written by the runner");
    assert_eq!(serde_json::from_slice::<String>(&seen.value).unwrap(), v2["wasm"]["signed_at"].as_str().unwrap());

    store.jobs.kv.put("app", serde_json::to_vec(&v1).unwrap().into()).await.unwrap();
    let (status, error) = run_of(&nats, "app");
    assert_eq!(status, "failed", "v1 written back: {error}");
    let v1_at = v1["wasm"]["signed_at"].as_str().unwrap();
    assert!(error.contains(&format!("job app was signed at {v1_at}, older than")), "{error}");
    assert!(error.contains("refused as a replay"), "{error}");

    // Removed and written back: still refused (the time seen outlives the job).
    nats.ok(&["rm", "app"]);
    store.jobs.kv.put("app", serde_json::to_vec(&v1).unwrap().into()).await.unwrap();
    let (status, error) = run_of(&nats, "app");
    assert_eq!((status.as_str(), error.contains("refused as a replay")), ("failed", true), "{error}");
    // The admin identity cannot move the time seen back.
    let admin = cronrun::connect::connect(&nats.url, Some(&nats.identity("admin")), "t").await.unwrap();
    let js = async_nats::jetstream::new(admin);
    let put = js.publish("$KV.cronrun_leases.signed.app", serde_json::to_vec(v1_at).unwrap().into()).await;
    let refused = match put {
        Err(_) => true,
        Ok(ack) => ack.await.is_err(),
    };
    assert!(refused, "the admin identity wrote signed.app");
    // A fresh signing of the same code runs again.
    deploy("v3");
    assert_eq!(run_of(&nats, "app").0, "succeeded");
}

/// Runs of `job` so far that pass `check`, once there is one.
async fn a_run_where(
    store: &cronrun::store::Store,
    job: &str,
    what: &str,
    check: impl Fn(&cronrun::record::RunRecord) -> bool,
) -> cronrun::record::RunRecord {
    // The first run compiles the 18 MB component (the Python interpreter) on this runner.
    eventually(Duration::from_secs(120), what, || async { runs(store, job).await.into_iter().find(|r| check(r)) }).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_job_carries_its_schedule_and_runs_in_the_same_sandbox() {
    let nats = Nats::start().await;
    let built = python_plugin("hello");
    let component = nats.dir.path().join("hello-py.wasm");
    std::fs::copy(&built, &component).unwrap();
    let file = component.to_str().unwrap();
    assert!(nats.fails(&["deploy", file]).contains("cronrun manifest FILE --schedule"));
    // A file over the plugin limit is refused before it is read (a sparse file: no disk).
    let huge = nats.dir.path().join("huge.wasm");
    std::fs::File::create(&huge).unwrap().set_len(cronrun::store::MAX_PLUGIN_BYTES as u64 + 1).unwrap();
    let huge = huge.to_str().unwrap();
    for args in [vec!["manifest", huge, "--schedule", "@daily"], vec!["deploy", huge, "--schedule", "@daily"]] {
        assert!(nats.fails(&args).contains("over the limit"), "{args:?}");
    }
    // Without a manifest, the flags give the schedule.
    nats.ok(&["deploy", file, "--name", "py-flags", "--schedule", "@yearly", "--timeout", "9s"]);
    let flags = nats.ok(&["get", "py-flags", "--output", "json"]);
    let flags: serde_json::Value = serde_json::from_str(&flags).unwrap();
    let spec = &flags["spec"];
    assert_eq!((spec["schedule"].as_str(), spec["timeout"].as_str()), (Some("@yearly"), Some("9s")), "{flags}");
    nats.ok(&["manifest", file, "--schedule", "*/2 * * * * *", "--timeout", "3s"]);
    // A second manifest, or a bad one, is refused, the files left as they were.
    let with_manifest = std::fs::read(&component).unwrap();
    assert!(nats.fails(&["manifest", file, "--schedule", "@daily"]).contains("already"));
    assert_eq!(std::fs::read(&component).unwrap(), with_manifest);
    let as_built = std::fs::read(&built).unwrap();
    let other = nats.dir.path().join("other.wasm");
    let refused = nats.fails(&[
        "manifest",
        built.to_str().unwrap(),
        "--schedule",
        "61 * * * *",
        "--out",
        other.to_str().unwrap(),
    ]);
    assert!(refused.contains("the manifest is refused"), "{refused}");
    assert!(!other.exists());
    assert_eq!(std::fs::read(&built).unwrap(), as_built);

    runs_in_the_same_sandbox(&nats, file, "py", "python").await;
}

/// Deploys `file` (a component whose manifest says every 2 s, a 3 s timeout) as
/// `<prefix>-hello`, `-spin` and `-grow` on an agent with a cache of its own, and checks
/// each run by its schedule as a Rust job's would: the greeting in the output, the endless
/// loop stopped at its timeout, the growing heap at the 64 MiB limit; the first runs wait
/// for the one compile, and no run is lost to it.
async fn runs_in_the_same_sandbox(nats: &Nats, file: &str, prefix: &str, language: &str) {
    let cache = nats.dir.path().join("wasm-cache");
    let agent = nats.agent_with_tables("a", &format!("[wasm]\ncache_dir = {:?}\n", cache.display().to_string()));
    ready(&agent).await;
    let store = nats.store().await;
    let [hello, spin, grow] = ["hello", "spin", "grow"].map(|mode| format!("{prefix}-{mode}"));
    nats.ok(&["deploy", file, "--name", &hello, "--config", "greeting=hi"]);
    assert!(nats.ok(&["get", &hello]).contains("*/2 * * * * *"), "the schedule came with the component");
    nats.ok(&["deploy", file, "--name", &spin, "--config", "mode=spin"]);
    nats.ok(&["deploy", file, "--name", &grow, "--config", "mode=grow"]);

    let said = a_run_where(&store, &hello, "the greeting to succeed", |r| r.status == Status::Succeeded).await;
    assert_eq!(said.trigger, cronrun::record::Trigger::Schedule);
    assert_eq!(chrono::Timelike::second(&said.scheduled_at.unwrap()) % 2, 0);
    let line = format!("hi from {language}: {hello} run {} (schedule)", said.run_id);
    assert_eq!(said.output, [line, format!("{language} ran attempt 1")]);
    let spun =
        a_run_where(&store, &spin, "the loop to time out", |r| r.status.is_final() && r.status != Status::Skipped)
            .await;
    assert_eq!((spun.status, spun.error.as_deref()), (Status::TimedOut, Some("timed out after 3s")));
    let grown = a_run_where(&store, &grow, "the heap to fail", |r| r.status.is_final()).await;
    assert_eq!(grown.status, Status::Failed);
    assert!(grown.error.as_deref().unwrap_or("").starts_with("memory limit exceeded"), "{grown:?}");
    // The runs that came while it compiled waited for that one compile, none lost.
    let log = agent.log();
    assert_eq!(log.matches("compiled plugin").count(), 1, "{log}");
    for job in [&hello, &spin, &grow] {
        let lost: Vec<_> = runs(&store, job).await.into_iter().filter(|r| r.status == Status::Lost).collect();
        assert!(lost.is_empty(), "{lost:?}");
    }
    assert!(!log.contains("run lost") && !log.contains("taken over"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_javascript_job_carries_its_schedule_and_runs_in_the_same_sandbox() {
    let nats = Nats::start().await;
    let component = nats.dir.path().join("hello-js.wasm");
    std::fs::copy(js_plugin("hello"), &component).unwrap();
    let file = component.to_str().unwrap();
    nats.ok(&["manifest", file, "--schedule", "*/2 * * * * *", "--timeout", "3s"]);
    runs_in_the_same_sandbox(&nats, file, "js", "javascript").await;
}

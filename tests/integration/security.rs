//! Least privilege against a real nats-server with the authorization `cronrun auth init`
//! writes: each role refused, operation by operation, what it must not do; clients
//! without a valid identity refused with one line; the CLI as a viewer reads only.

use std::time::Duration;

use crate::support::*;
use cronrun::auth::Credentials;
use futures::StreamExt;

/// How long the client may take to hand on an error the server sent before its `PONG`.
const VERDICT: Duration = Duration::from_millis(500);

/// What an identity tries: publish to a subject, or subscribe to one.
#[derive(Clone, Copy, Debug)]
enum Op {
    Publish(&'static str),
    Subscribe(&'static str),
}

const IDS: [&str; 5] = ["admin", "viewer", "scheduler", "runner", "agent"];

/// (operation, what it does, the identities allowed it; every other identity is refused).
const CASES: &[(Op, &str, &[&str])] = &[
    (Op::Publish("$KV.cronrun_jobs.evil"), "write a job spec", &["admin"]),
    (Op::Publish("$O.cronrun_plugins.C.evil"), "write a plugin chunk", &["admin"]),
    (Op::Publish("$O.cronrun_plugins.M.evil"), "write plugin metadata", &["admin"]),
    (Op::Publish("$JS.API.STREAM.PURGE.OBJ_cronrun_plugins"), "purge the plugin store", &["admin"]),
    (Op::Publish("cronrun.ctl.run.job.run1.kill"), "send a kill request", &["admin", "runner", "agent"]),
    (Op::Publish("cronrun.dispatch.default"), "dispatch a run", &["admin", "scheduler", "agent"]),
    (Op::Publish("$KV.cronrun_runs.job.run1"), "write a run record", &["admin", "scheduler", "runner", "agent"]),
    (Op::Publish("$KV.cronrun_leases.run.job.run1"), "write a run lease", &["runner", "agent"]),
    (
        Op::Publish("$KV.cronrun_leases.signed.job"),
        "move the newest signing time seen of a signed Wasm job (the replay guard)",
        &["runner", "agent"],
    ),
    (
        Op::Publish("$JS.API.DIRECT.GET.KV_cronrun_runs"),
        "read a job's run records in one request",
        &["admin", "viewer", "scheduler", "runner", "agent"],
    ),
    (Op::Publish("$KV.cronrun_leases.shard.1"), "write a shard lease", &["scheduler", "agent"]),
    (Op::Publish("$KV.cronrun_leases.shards"), "change the shard count", &["scheduler", "agent"]),
    (Op::Publish("cronrun.logs.job.run1"), "write a run's output", &["runner", "agent"]),
    (Op::Publish("cronrun.events.job.succeeded"), "publish an event", &["admin", "scheduler", "runner", "agent"]),
    (
        Op::Publish("$JS.API.CONSUMER.CREATE.CRONRUN_DISPATCH.x.cronrun.dispatch.default"),
        "take runs off the queue",
        &["runner", "agent"],
    ),
    // The watches' consumers take no acks: nobody needs to send them.
    (Op::Publish("$JS.ACK.KV_cronrun_schedules.x.1.2.3.4.5.6.7"), "acknowledge the schedules index's messages", &[]),
    (Op::Publish("$JS.ACK.KV_cronrun_leases.x.1.2.3.4.5.6.7"), "acknowledge the leases bucket's messages", &[]),
    (Op::Publish("$JS.ACK.KV_cronrun_jobs.x.1.2.3.4.5.6.7"), "acknowledge the jobs bucket's messages", &[]),
    (Op::Publish("cronrun.ctl.answer.t1"), "answer a control request", &["admin", "runner", "agent"]),
    (Op::Subscribe("cronrun.ctl.answer.t1"), "receive control answers", &["admin", "runner", "agent"]),
    (
        Op::Publish("$JS.API.CONSUMER.DELETE.CRONRUN_EVENTS.notify"),
        "delete the notifications' consumer",
        &["admin", "scheduler", "agent"],
    ),
    (
        Op::Publish("$JS.API.CONSUMER.CREATE.KV_cronrun_runs.chains"),
        "make the chains' consumer",
        &["admin", "scheduler", "agent"],
    ),
    (
        Op::Publish("$JS.API.CONSUMER.DELETE.CRONRUN_EVENTS.oc1"),
        "end a reading consumer",
        &["admin", "viewer", "scheduler", "agent"],
    ),
    (
        Op::Publish("$JS.ACK.KV_cronrun_runs.chains.1.2.3.4.5.6.7"),
        "acknowledge the chains' records",
        &["scheduler", "agent"],
    ),
    (Op::Publish("$JS.ACK.KV_cronrun_runs.x.1.2.3.4.5.6.7"), "acknowledge another's run records", &[]),
    (Op::Publish("$JS.API.STREAM.DELETE.KV_cronrun_jobs"), "delete the jobs bucket", &[]),
    (Op::Publish("$JS.API.STREAM.UPDATE.CRONRUN_DISPATCH"), "reconfigure the dispatch stream", &[]),
    (Op::Publish("$JS.API.STREAM.CREATE.KV_cronrun_jobs"), "create the jobs bucket", &["admin", "scheduler", "agent"]),
    (Op::Publish("$JS.API.STREAM.CREATE.EVIL"), "create a stream of its own", &[]),
    (Op::Publish("$KV.other_jobs.x"), "write another namespace's jobs", &[]),
    (Op::Publish("$SYS.REQ.SERVER.PING"), "ask the system account", &[]),
    (Op::Publish("orders.created"), "publish as a Wasm guest may", &["runner", "agent"]),
    (Op::Publish("payments.created"), "publish outside the guest subjects", &[]),
    (Op::Subscribe("cronrun.ctl.run.job.run1.kill"), "receive kill requests", &["runner", "agent"]),
    (Op::Subscribe("cronrun.dispatch.default"), "snoop on dispatches", &[]),
    (Op::Subscribe("_INBOX.UOTHER.reply"), "read another identity's replies", &[]),
    (Op::Subscribe("$KV.cronrun_jobs.evil"), "snoop on job writes", &[]),
];

/// Whether `id` may do `op`: the server answers a refused publish or subscription with
/// `-ERR 'Permissions Violation for …'` before the `PONG` of the flush that follows it.
async fn allowed(nats: &Nats, id: &str, op: Op) -> bool {
    let (client, mut rx) = nats.client_as(id).await;
    let (kind, subject) = match op {
        Op::Publish(subject) => {
            client.publish(subject, "{}".into()).await.unwrap();
            ("Publish", subject)
        }
        Op::Subscribe(subject) => {
            std::mem::forget(client.subscribe(subject).await.unwrap());
            ("Subscription", subject)
        }
    };
    client.flush().await.unwrap();
    let refused = refused(&mut rx, (kind, subject), VERDICT).await;
    client.drain().await.ok();
    !refused
}

#[tokio::test(flavor = "multi_thread")]
async fn each_role_is_refused_what_it_must_not_do() {
    let nats = Nats::start().await;
    // The layout exists, as it does once any agent or admin has run.
    let _store = nats.store().await;
    let checks = CASES.iter().flat_map(|&(op, what, who)| {
        let nats = &nats;
        IDS.iter().map(move |&id| async move {
            let got = allowed(nats, id, op).await;
            let want = who.contains(&id);
            (got != want).then(|| format!("{id} {} {what} ({op:?})", if got { "could" } else { "could not" }))
        })
    });
    // A few at a time: an allowed operation waits VERDICT for a refusal that does not come.
    let wrong: Vec<String> =
        futures::stream::iter(checks).buffer_unordered(8).filter_map(|w| async { w }).collect().await;
    assert!(wrong.is_empty(), "permissions differ from the table:\n{}", wrong.join("\n"));
    let log = std::fs::read_to_string(nats.dir.path().join("nats-server.log")).unwrap();
    assert!(log.contains("Publish Violation") && log.contains("Subscription Violation"), "the server logs refusals");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_viewer_reads_everything_and_writes_nothing() {
    let nats = Nats::start().await;
    let agent = nats.agent("a", "");
    ready(&agent).await;
    nats.ok(&["add", "seen", "--schedule", "@yearly", "--", "echo", "hi"]);
    nats.ok(&["add", "sleepy", "--schedule", "@yearly", "--", "sleep", "60"]);
    let sleeping = nats.trigger("sleepy");
    let run = nats.trigger("seen");
    eventually(Duration::from_secs(20), "the run to succeed", || async {
        String::from_utf8_lossy(&nats.cli(&["runs", "seen"]).stdout).contains("succeeded").then_some(())
    })
    .await;
    let viewer =
        |args: &[&str]| nats.command().args(args).env("CRONRUN_CREDS", nats.identity("viewer")).output().unwrap();
    for args in [&["ls"][..], &["get", "seen"], &["runs", "seen"], &["logs", &run], &["status"]] {
        let out = viewer(args);
        assert!(out.status.success(), "viewer {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(String::from_utf8_lossy(&viewer(&["logs", &run]).stdout).contains("hi"));
    let status = |run: &str| {
        let out = nats.ok(&["runs", run.split('.').next().unwrap(), "--output", "json"]);
        serde_json::from_str::<Vec<serde_json::Value>>(&out).unwrap()[0]["status"].as_str().unwrap().to_string()
    };
    eventually(Duration::from_secs(20), "sleepy to run", || async { (status(&sleeping) == "running").then_some(()) })
        .await;
    let writes: [&[&str]; 5] = [
        &["add", "evil", "--schedule", "@yearly", "--", "true"],
        &["pause", "seen"],
        &["rm", "seen"],
        &["trigger", "seen"],
        &["kill", &sleeping],
    ];
    for args in writes {
        let out = viewer(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "a viewer could {args:?}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("NATS refused it"), "{args:?}: {err}");
    }
    // Nothing of it landed: no job added, paused or removed, no second run.
    let jobs: Vec<serde_json::Value> = serde_json::from_str(&nats.ok(&["ls", "--output", "json"])).unwrap();
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    assert!(!nats.ok(&["ls"]).contains("paused"));
    assert_eq!(status(&sleeping), "running", "the viewer's kill did not reach the runner");
    assert_eq!(runs(&nats.store().await, "seen").await.len(), 1);
}

/// The audit trail: each CLI write says who made it, in the job's history (which a viewer
/// may read) and in its event.
#[tokio::test(flavor = "multi_thread")]
async fn cli_writes_record_the_identity_that_made_them() {
    let nats = Nats::start().await;
    let Credentials::Nkey { public_key: admin, .. } = Credentials::load(&nats.identity("admin")).unwrap() else {
        panic!("admin is an nkey identity")
    };
    let by_admin = format!("admin {admin} (");
    nats.ok(&["add", "audited", "--schedule", "@yearly", "--", "true"]);
    nats.trigger("audited");
    nats.ok(&["pause", "audited"]);
    nats.ok(&["rm", "audited"]);

    let mut viewer = nats.command();
    viewer.args(["get", "audited", "--history", "--output", "json"]).env("CRONRUN_CREDS", nats.identity("viewer"));
    let out = viewer.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let history: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let written: Vec<(&str, &str)> =
        history.iter().map(|r| (r["operation"].as_str().unwrap(), r["by"].as_str().unwrap_or(""))).collect();
    assert_eq!(written.iter().map(|w| w.0).collect::<Vec<_>>(), ["put", "put", "delete"], "{history:?}");
    assert!(written.iter().all(|(_, by)| by.starts_with(&by_admin)), "{written:?}");

    let store = nats.store().await;
    let written = eventually(Duration::from_secs(10), "the four events of the writes", || async {
        Some(events(&store, "audited", "*").await).filter(|e| e.len() >= 4)
    })
    .await;
    let mut seen = Vec::new();
    for event in written {
        assert!(event["by"].as_str().unwrap_or("").starts_with(&by_admin), "{event}");
        seen.push((event["event"].as_str().unwrap().to_string(), event["detail"].as_str().unwrap_or("").to_string()));
    }
    let kinds: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["changed", "dispatched", "changed", "removed"], "{seen:?}");
    assert!(seen[0].1.starts_with("added") && seen[2].1.starts_with("paused"), "{seen:?}");
}

/// Two identities to be refused, written in `dir`: a seed the server does not know
/// (`stranger.nk`), and a copy of `seed` that others may read (`open.nk`).
fn refused_identities(
    dir: &std::path::Path,
    seed: impl AsRef<std::path::Path>,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let stranger = dir.join("stranger.nk");
    cronrun::private_file::write(&stranger, &nkeys::KeyPair::new_user().seed().unwrap()).unwrap();
    let open = dir.join("open.nk");
    std::fs::copy(seed, &open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    (stranger, open)
}

#[tokio::test(flavor = "multi_thread")]
async fn clients_without_a_valid_identity_are_refused_with_one_line() {
    let nats = Nats::start().await;
    let dir = test_dir();
    let (stranger, open) = refused_identities(dir.path(), nats.identity("admin"));
    let garbage = dir.path().join("garbage.nk");
    cronrun::private_file::write(&garbage, "not a seed").unwrap();
    let cases = [
        ("", "requires credentials"),
        (stranger.to_str().unwrap(), "does not accept the identity"),
        (open.to_str().unwrap(), "chmod 600"),
        (garbage.to_str().unwrap(), "does not hold an nkey user seed"),
        ("/nonexistent/admin.nk", "cannot read /nonexistent/admin.nk"),
    ];
    for (creds, expected) in cases {
        let mut command = nats.command();
        command.args(["ls"]).env("XDG_DATA_HOME", dir.path());
        match creds {
            "" => command.env_remove("CRONRUN_CREDS"),
            path => command.env("CRONRUN_CREDS", path),
        };
        let out = command.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{creds:?} was let in");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(expected), "{creds:?}: {err}");
    }
}

/// `cronrun auth init` writes identities and a config nats-server starts with; a second
/// run keeps the identities; a guest subject that could reach a reserved one is refused.
#[tokio::test(flavor = "multi_thread")]
async fn auth_init_writes_a_config_the_server_accepts() {
    let dir = test_dir();
    let ids = dir.path().join("auth");
    let init = |extra: &[&str]| {
        let mut command = std::process::Command::new(BIN);
        command.args(["auth", "init", "--dir"]).arg(&ids).args(extra);
        command.output().unwrap()
    };
    let out = init(&["--routes", "n1:6222,n2:6222", "--guest-publish", "orders.>"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let admin = std::fs::read_to_string(ids.join("admin.nk")).unwrap();
    let again = init(&["--publish", "orders.>"]);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert!(String::from_utf8_lossy(&again.stdout).contains("publisher.nk: publishes orders.>"));
    assert_eq!(std::fs::read_to_string(ids.join("admin.nk")).unwrap(), admin, "identities are kept");
    for (args, expected) in [
        (&["--guest-publish", "$KV.>"][..], "could reach $KV.>"),
        (&["--publish", "cronrun.>"], "could reach cronrun."),
        (&["--publish", "_INBOX.x"], "could reach _INBOX"),
        (&["--publish", "$MQTT.>"], "is not a subject pattern"),
        (&["--publish", "orders..x"], "is not a subject pattern"),
        (&["--publish", "orders.x", "--routes", "n1:6222,evil@n2:6222"], "give host:port"),
        (&["--guest-publish", ">"], "could reach $JS.>"),
        (&["--routes", "n1:6222,evil@n2:6222"], "give host:port"),
        (&["--routes", "nats://n1:6222"], "give host:port"),
        (&["--jetstream-domain", "a.b"], "JetStream domain \"a.b\""),
    ] {
        let conf = std::fs::read(ids.join("auth.conf")).unwrap();
        let refused = init(args);
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success() && err.contains(expected), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert_eq!(std::fs::read(ids.join("auth.conf")).unwrap(), conf, "{args:?}: nothing written");
    }
    // With the hub's JetStream domain each identity also gets the domain's forms of its
    // JetStream subjects (for the clients of leaf nodes), and only those.
    let runner = std::process::Command::new(BIN)
        .args(["auth", "permissions", "runner", "--jetstream-domain", "hub"])
        .output()
        .unwrap();
    let runner: serde_json::Value = serde_json::from_slice(&runner.stdout).unwrap();
    let allowed: Vec<&str> = runner["publish"]["allow"].as_array().unwrap().iter().filter_map(|s| s.as_str()).collect();
    for subject in
        ["$KV.cronrun_runs.>", "$JS.hub.API.$KV.cronrun_runs.>", "$JS.hub.API.CONSUMER.MSG.NEXT.CRONRUN_DISPATCH.>"]
    {
        assert!(allowed.contains(&subject), "{subject}: {allowed:?}");
    }
    assert!(!allowed.iter().any(|s| s.starts_with("$JS.hub.API.$KV.cronrun_jobs")), "{allowed:?}");
    let cluster = std::fs::read_to_string(ids.join("cluster-auth.conf")).unwrap();
    assert!(cluster.contains("nats-route://cronrun-route:") && cluster.contains("@n2:6222"), "{cluster}");

    let opts = cronrun::embedded::ServerOptions {
        // nats-server resolves includes relative to the including file.
        extra_config: "include ../auth/auth.conf\n".into(),
        probe_creds: Some(ids.join("admin.nk").to_string_lossy().into_owned()),
        ..Default::default()
    };
    let server = cronrun::embedded::EmbeddedNats::start(&dir.path().join("server"), &opts).await.unwrap();
    let admin = ids.join("admin.nk");
    let cli = |creds: &std::path::Path, args: &[&str]| {
        std::process::Command::new(BIN)
            .args(args)
            .env("CRONRUN_NATS", &server.url)
            .env("CRONRUN_CREDS", creds)
            .output()
            .unwrap()
    };
    let added = cli(&admin, &["add", "j", "--schedule", "@daily", "--", "true"]);
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    let listed = cli(&ids.join("viewer.nk"), &["ls"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains("@daily"));

    // The publisher (`--publish orders.>`) publishes those subjects and nothing of cronrun's.
    std::fs::write(
        dir.path().join("on.toml"),
        "[[job]]\nname = \"o\"\non = { subject = \"orders.new\" }\nshell = \"true\"\n",
    )
    .unwrap();
    let applied = cli(&admin, &["apply", "-f", &dir.path().join("on.toml").display().to_string()]);
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    let publisher = ids.join("publisher.nk").display().to_string();
    let client = cronrun::connect::connect(&server.url, Some(&publisher), "publisher").await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    let publish = |subject: &'static str| {
        let js = js.clone();
        async move {
            let ack =
                tokio::time::timeout(Duration::from_secs(3), async { js.publish(subject, "x".into()).await?.await });
            matches!(ack.await, Ok(Ok(_)))
        }
    };
    assert!(publish("orders.new").await, "the publisher may publish orders.>");
    assert!(!publish("cronrun.dispatch.default").await, "nor a dispatch");
    let info =
        tokio::time::timeout(Duration::from_secs(3), client.request("$JS.API.STREAM.INFO.CRONRUN_MESSAGES", "".into()));
    assert!(!matches!(info.await, Ok(Ok(_))), "nor call the JetStream API");
    // `up --publish` shapes the server `up` starts; with a server of its own it is refused.
    let up = cli(&admin, &["up", "--publish", "orders.>"]);
    let err = String::from_utf8_lossy(&up.stderr);
    assert!(!up.status.success() && err.contains("give them to `cronrun auth init` there"), "{err}");
}

/// The record of a manual run of `job`, once it ended.
fn run_now(nats: &Nats, job: &str) -> serde_json::Value {
    let out = nats.cli(&["trigger", job, "--wait", "--output", "json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)))
}

#[tokio::test(flavor = "multi_thread")]
async fn shell_jobs_run_as_their_user_and_never_as_root_by_accident() {
    let nats = Nats::start().await;
    let scheduler = nats.agent("s", "roles = [\"scheduler\"]");
    let runner = nats.runner_with("r", "allow_root = false");
    ready(&scheduler).await;
    ready(&runner).await;
    let secret = nats.identity("agent");
    let seed = std::fs::read_to_string(&secret).unwrap();
    let show = "id -un; id -g; echo $HOME; pwd";
    let jobs = format!(
        "[[job]]\nname = \"plain\"\nschedule = \"@yearly\"\nshell = \"{show}\"\n\
         [[job]]\nname = \"as-nobody\"\nschedule = \"@yearly\"\nshell = {{ command = \"{show}\", user = \"nobody\", group = \"4242\" }}\n\
         [[job]]\nname = \"as-root\"\nschedule = \"@yearly\"\nshell = {{ command = \"id -un\", user = \"root\" }}\n\
         [[job]]\nname = \"as-nobody-at-all\"\nschedule = \"@yearly\"\nshell = {{ command = \"id -un\", user = \"no-such-user\" }}\n\
         [[job]]\nname = \"steal\"\nschedule = \"@yearly\"\nshell = {{ command = \"cat {secret}\", user = \"nobody\" }}\n"
    );
    apply(&nats, &jobs);
    let root = nix::unistd::geteuid().is_root();
    let me = String::from_utf8(std::process::Command::new("id").arg("-un").output().unwrap().stdout).unwrap();
    // (job, status, what its output or error must contain)
    let cases: Vec<(&str, &str, String)> = if root {
        vec![
            ("plain", "failed", "it would run as root".into()),
            ("as-nobody", "succeeded", "nobody|4242|/nonexistent|/".into()),
            ("as-root", "failed", "it would run as root".into()),
            ("as-nobody-at-all", "failed", "there is no user \"no-such-user\" on this runner".into()),
            // A job as another user cannot read the agent's NATS identity.
            ("steal", "failed", "Permission denied".into()),
        ]
    } else {
        vec![
            ("plain", "succeeded", me.trim().to_string()),
            ("as-nobody", "failed", "not root, and cannot switch to user \"nobody\"".into()),
            ("as-root", "failed", "it would run as root".into()),
        ]
    };
    for (job, status, needle) in cases {
        let record = run_now(&nats, job);
        assert_eq!(record["status"], status, "{job}: {record}");
        let output: Vec<&str> = record["output"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
        let seen = format!("{}|{}", output.join("|"), record["error"].as_str().unwrap_or(""));
        assert!(seen.contains(&needle), "{job}: {needle:?} not in {seen:?}");
        assert!(!seen.contains(seed.trim()), "{job}: the agent's seed reached the output");
    }
}

/// `[scheduler] creds`: the scheduler on a connection of its own as the scheduler
/// identity, the rest of the agent as the runner's. Neither identity could do the other's
/// part (a runner may not lead shards or create the layout, a scheduler may not take runs
/// or answer kill requests), so jobs firing, running and being killed show each
/// connection is the one it should be. A bad scheduler identity stops the start.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_with_a_scheduler_identity_of_its_own_fires_runs_and_kills() {
    let nats = Nats::start().await;
    // A scheduler identity the server refuses, or a seed others may read: the agent does
    // not start, and says why in one line.
    let (stranger, open) = refused_identities(nats.dir.path(), nats.identity("scheduler"));
    for (name, creds, expected) in
        [("stranger", &stranger, "does not accept the identity"), ("open", &open, "chmod 600")]
    {
        let mut refused = nats.agent_with_scheduler_creds(name, "1s", &creds.display().to_string());
        let status = wait_exit(&mut refused.child, Duration::from_secs(30)).await;
        let log = refused.log();
        let last = log.trim_end().lines().last().unwrap_or_default();
        assert!(!status.success() && last.contains(expected), "{name}: {status}; {log}");
    }
    let agent = nats.agent_with_scheduler_creds("a", "1s", &nats.identity("scheduler"));
    ready(&agent).await;
    let ticks = nats.dir.path().join("ticks");
    nats.ok(&["add", "tick", "--schedule", "* * * * * *", "--", &format!("echo x >> {}", ticks.display())]);
    eventually(Duration::from_secs(20), "two fires of tick to run", || async {
        (std::fs::read_to_string(&ticks).unwrap_or_default().lines().count() >= 2).then_some(())
    })
    .await;
    nats.ok(&["add", "sleepy", "--schedule", "@yearly", "--", "sleep", "60"]);
    let sleeping = nats.trigger("sleepy");
    let store = nats.store().await;
    eventually(Duration::from_secs(20), "sleepy to run", || async {
        let (job, run) = sleeping.split_once('.').unwrap();
        let record = store.get_run(job, run).await.ok()?.record;
        (record.status == cronrun::record::Status::Running).then_some(())
    })
    .await;
    let out = nats.ok(&["kill", &sleeping]);
    assert!(out.contains("sent SIGTERM"), "{out}");
    assert_eq!(final_record(&store, &sleeping).await.status, cronrun::record::Status::Cancelled);
}

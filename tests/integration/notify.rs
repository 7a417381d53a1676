//! Notifications: delivered from the events stream by the agents' one shared consumer,
//! to a real HTTP receiver (and a NATS subject), signed, retried until the receiver is
//! back, and told once per event whichever agents are up.

use std::time::Duration;

use futures::StreamExt;

use crate::support::*;

const SECRET: &str = "s3cret-for-tests";

/// `[notify]` of the agents: the signing secret of the tests, and the receiver's address
/// (127.0.0.1, internal: refused unless allowed).
fn notify_tables() -> String {
    format!("[notify]\ntimeout = \"2s\"\nallow_hosts = [\"127.0.0.1\"]\n[notify.secrets]\nops = \"{SECRET}\"\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_run_is_notified_once_with_two_agents_up_signed_and_listed() {
    let nats = Nats::start().await;
    let receiver = Receiver::start(0, 0).await;
    let agents = [nats.agent_with_tables("a1", &notify_tables()), nats.agent_with_tables("a2", &notify_tables())];
    for agent in &agents {
        ready(agent).await;
    }
    let hook = receiver.url("/hook");
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"breaks\"\nschedule = \"@yearly\"\nshell = \"echo boom; exit 3\"\n\
             notify = [{{ on = [\"failed\"], webhook = \"{hook}\", secret = \"ops\" }}]\n"
        ),
    );
    let key = nats.trigger("breaks");
    let run_id = key.split_once('.').unwrap().1.to_string();
    let store = nats.store().await;
    eventually(Duration::from_secs(20), "the notice to be delivered", || async {
        (!events(&store, "breaks", "notified").await.is_empty()).then_some(())
    })
    .await;
    // Two agents pull from the one consumer: whichever took it, the other never sees it.
    // A second delivery would be of an event still pending or unacked: none is left.
    notices_settled(&store).await;
    let received = receiver.received();
    assert_eq!(received.len(), 1, "{received:#?}");
    let notice = &received[0];
    assert_eq!(notice.path, "/hook");
    let body = notice.json();
    assert_eq!(body["job"], "breaks");
    assert_eq!(body["run_id"], run_id.as_str());
    assert_eq!((body["notice"].as_str(), body["status"].as_str()), (Some("failed"), Some("failed")));
    assert_eq!(body["exit_code"], 3);
    assert!(body["error"].as_str().unwrap().contains("exited with code 3"), "{body}");
    assert_eq!(body["output"], serde_json::json!(["boom"]));
    let expected = cronrun::notify::signature(SECRET.as_bytes(), &notice.body);
    assert_eq!(notice.header("Cronrun-Signature"), Some(expected));
    assert!(notice.header("Cronrun-Delivery").is_some_and(|d| d.starts_with("CRONRUN_EVENTS-")));
    // Visible to operators.
    let listed = nats.ok(&["notifications", "breaks"]);
    assert!(listed.contains("delivered") && listed.contains(&format!("POST {hook}: 200 OK")), "{listed}");
}

/// Older agents made the `notify` consumer with one filter per kind they handle; an agent
/// now finds it so, updates it to one filter on every event, and delivers as before.
#[tokio::test(flavor = "multi_thread")]
async fn a_notify_consumer_an_older_agent_made_with_many_filters_is_updated_and_delivers() {
    let nats = Nats::start().await;
    let store = nats.store().await;
    let stream = store.js.get_stream(store.names.events_stream()).await.unwrap();
    let older = async_nats::jetstream::consumer::pull::Config {
        durable_name: Some("notify".into()),
        filter_subjects: ["dispatched", "failed", "succeeded"].map(|k| store.names.event_subject("*", k)).to_vec(),
        deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::New,
        ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
        ..Default::default()
    };
    stream.create_consumer(older).await.unwrap();
    let receiver = Receiver::start(0, 0).await;
    let agent = nats.agent_with_tables("a", &notify_tables());
    ready(&agent).await;
    let hook = receiver.url("/hook");
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"breaks\"\nschedule = \"@yearly\"\nshell = \"exit 3\"\n\
             notify = [{{ on = [\"failed\"], webhook = \"{hook}\" }}]\n"
        ),
    );
    nats.trigger("breaks");
    eventually(Duration::from_secs(20), "the notice to be delivered", || async {
        (!receiver.received().is_empty()).then_some(())
    })
    .await;
    let config = stream.consumer_info("notify").await.unwrap().config;
    assert_eq!((config.filter_subject.as_str(), config.filter_subjects.len()), ("cronrun.events.*.*", 0));
    // The events no rule needs (`started`, `notified`) are read and acked too: the ack
    // floor reaches the stream's last event (that of the older filters stops short of it).
    eventually(Duration::from_secs(10), "every event acked", || async {
        let info = stream.consumer_info("notify").await.unwrap();
        let last = store.js.get_stream(store.names.events_stream()).await.unwrap().cached_info().state.last_sequence;
        (info.num_ack_pending == 0 && info.ack_floor.stream_sequence == last).then_some(())
    })
    .await;
    assert_eq!(receiver.received().len(), 1);
    assert_eq!(receiver.received()[0].json()["notice"], "failed");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_notice_is_retried_until_the_receiver_is_back() {
    let nats = Nats::start().await;
    let port = free_port();
    let agent = nats.agent_with_tables("a", &notify_tables());
    ready(&agent).await;
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"down\"\nschedule = \"@yearly\"\nshell = \"exit 1\"\n\
             notify = [{{ on = [\"failed\"], webhook = \"http://127.0.0.1:{port}/x\" }}]\n"
        ),
    );
    nats.trigger("down");
    let store = nats.store().await;
    let failed = eventually(Duration::from_secs(20), "a failed delivery", || async {
        events(&store, "down", "notify_failed").await.into_iter().next()
    })
    .await;
    assert!(failed["detail"].as_str().unwrap().contains("try 1 of 8"), "{failed}");
    let receiver = Receiver::start(port, 0).await;
    eventually(Duration::from_secs(30), "the notice once the receiver is back", || async {
        (!receiver.received().is_empty()).then_some(())
    })
    .await;
    eventually(Duration::from_secs(10), "the delivery recorded", || async {
        (!events(&store, "down", "notified").await.is_empty()).then_some(())
    })
    .await;
    assert_eq!(receiver.received().len(), 1);
    assert_eq!(receiver.received()[0].json()["notice"], "failed");
    let listed = nats.ok(&["notifications"]);
    assert!(listed.contains("failed") && listed.contains("delivered"), "{listed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_in_a_row_then_recovery_are_told_as_the_rules_say_on_a_webhook_and_a_subject() {
    let nats = Nats::start().await;
    let receiver = Receiver::start(0, 0).await;
    let agent = nats.agent_with_tables("a", &notify_tables());
    ready(&agent).await;
    let flag = nats.dir.path().join("healthy");
    let hook = receiver.url("/slack");
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"flaps\"\nschedule = \"@yearly\"\nshell = \"test -f {}\"\n\
             notify = [{{ on = [\"failed\", \"recovered\"], webhook = \"{hook}\", after = 2, format = \"slack\" }},\n\
             {{ on = [\"recovered\"], subject = \"ops.cron\" }}]\n",
            flag.display()
        ),
    );
    let client = nats.client().await;
    let mut subject = client.subscribe("cronrun.notify.ops.cron").await.unwrap();
    client.flush().await.unwrap();
    let store = nats.store().await;
    for _ in 0..2 {
        let key = nats.trigger("flaps");
        final_record(&store, &key).await;
    }
    eventually(Duration::from_secs(20), "the second failure told", || async {
        (receiver.received().len() == 1).then_some(())
    })
    .await;
    std::fs::write(&flag, "").unwrap();
    let key = nats.trigger("flaps");
    let recovered = final_record(&store, &key).await;
    assert_eq!(recovered.status, cronrun::record::Status::Succeeded);
    eventually(Duration::from_secs(20), "the recovery told", || async {
        (receiver.received().len() == 2).then_some(())
    })
    .await;
    let texts: Vec<String> =
        receiver.received().iter().map(|r| r.json()["text"].as_str().unwrap().to_string()).collect();
    assert!(texts[0].contains("job flaps failed") && texts[0].contains("2 failures in a row"), "{texts:?}");
    assert!(texts[1].contains("job flaps recovered"), "{texts:?}");
    let published = tokio::time::timeout(Duration::from_secs(10), subject.next()).await.unwrap().unwrap();
    let body: serde_json::Value = serde_json::from_slice(&published.payload).unwrap();
    assert_eq!((body["notice"].as_str(), body["failures_in_a_row"].as_u64()), (Some("recovered"), Some(2)));
    // The first failure (one in a row, below `after`) was told to nobody.
    assert_eq!(receiver.received().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_rules_are_refused_at_apply_with_one_line_and_nothing_written() {
    let nats = Nats::start().await;
    let cases = [
        ("on = [\"failed\"], webhook = \"ftp://x/y\"", "notify[0].webhook"),
        ("on = [\"failed\"], subject = \"ops.>\"", "notify[0].subject"),
        ("on = [\"late\"], webhook = \"https://x\"", "notify[0].late: on = [\"late\"] needs late = "),
        ("on = [\"late\"], late = \"99999h\", webhook = \"https://x\"", "late must be 1s to 24h"),
        ("on = [\"failed\"], webhook = \"https://x\", after = 50", "at most history.failed"),
        ("on = [\"failed\"]", "exactly one of webhook and subject"),
    ];
    let file = nats.dir.path().join("jobs.toml");
    for (rule, needle) in cases {
        let job = format!("[[job]]\nname = \"j\"\nschedule = \"@daily\"\nshell = \"true\"\nnotify = [{{ {rule} }}]\n");
        std::fs::write(&file, job).unwrap();
        let err = nats.fails(&["apply", "-f", file.to_str().unwrap()]);
        assert!(err.contains(needle), "{rule}: {err}");
    }
    let missing = nats.fails(&["get", "j"]);
    assert!(missing.contains("j"), "{missing}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_run_that_is_retried_is_not_told_as_lost_and_its_retry_is() {
    let nats = Nats::start().await;
    let receiver = Receiver::start(0, 0).await;
    let config = format!("roles = [\"scheduler\"]\n{}\n{}", test_config("s"), notify_tables());
    let scheduler = nats.agent_with_env("s", &config, &[]);
    let mut runners = [nats.agent("r1", "roles = [\"runner\"]"), nats.agent("r2", "roles = [\"runner\"]")];
    for agent in runners.iter().chain([&scheduler]) {
        ready(agent).await;
    }
    let hook = receiver.url("/hook");
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"dies\"\nschedule = \"@yearly\"\nretries = {{ max = 1, backoff = \"1s\" }}\n\
             shell = \"test $CRONRUN_ATTEMPT = 2 || sleep 60\"\n\
             notify = [{{ on = [\"lost\", \"retrying\", \"succeeded\"], webhook = \"{hook}\" }}]\n"
        ),
    );
    let key = nats.trigger("dies");
    let (job, run) = cronrun::record::parse_run_key(&key).unwrap();
    let store = nats.store().await;
    let running = eventually(Duration::from_secs(10), "attempt 1 running", || async {
        store.get_run(job, run).await.ok().map(|s| s.record).filter(|r| r.status == cronrun::record::Status::Running)
    })
    .await;
    runners.iter_mut().find(|r| Some(r.name.as_str()) == running.host.as_deref()).unwrap().kill9();
    let done = final_record(&store, &key).await;
    assert_eq!((done.attempt, done.status), (2, cronrun::record::Status::Succeeded));
    let notices = eventually(Duration::from_secs(20), "the retry and the success told", || async {
        let notices: Vec<String> =
            receiver.received().iter().map(|r| r.json()["notice"].as_str().unwrap().to_string()).collect();
        (notices.len() >= 2).then_some(notices)
    })
    .await;
    let mut sorted = notices.clone();
    sorted.sort();
    assert_eq!(sorted, ["retrying", "succeeded"], "attempt 1 lost and retried is no final loss: {notices:?}");
}

/// `late`: a fire whose run has not succeeded `late` after its instant is told once, with
/// the run's status then; a fire that succeeded in time is not told. Two agents share the
/// check, as every notice; they publish the events of a deployment's defaults, where the
/// `dispatched` event the check rides on goes out for these jobs alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_fire_not_succeeded_in_time_is_told_late_once_and_one_in_time_is_not() {
    let nats = Nats::start().await;
    let receiver = Receiver::start(0, 0).await;
    let agent = |name: &str| {
        nats.agent_with_env(name, &format!("{}\n{}\n", default_events(&test_config(name)), notify_tables()), &[])
    };
    let agents = [agent("a1"), agent("a2")];
    for agent in &agents {
        ready(agent).await;
    }
    let rule =
        |path: &str| format!("notify = [{{ on = [\"late\"], late = \"3s\", webhook = \"{}\" }}]", receiver.url(path));
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"slow\"\nschedule = \"*/10 * * * * *\"\nshell = \"sleep 6\"\n{}\n\
             [[job]]\nname = \"quick\"\nschedule = \"*/10 * * * * *\"\nshell = \"true\"\n{}\n",
            rule("/slow"),
            rule("/quick")
        ),
    );
    let store = nats.store().await;
    let told = eventually(Duration::from_secs(30), "a late notice", || async {
        let received = receiver.received();
        (!received.is_empty()).then_some(received)
    })
    .await;
    let body = told[0].json();
    assert_eq!((body["job"].as_str(), body["notice"].as_str()), (Some("slow"), Some("late")), "{body}");
    // Queued or running, whichever the run had reached 3 s after its instant on a loaded
    // machine; never an end, since the command sleeps 6 s.
    assert!(matches!(body["status"].as_str(), Some("queued" | "running")), "{body}");
    let run_id = body["run_id"].as_str().unwrap().to_string();
    // The slow run ends and quick's fire of the same instant is long past its deadline:
    // nothing more about that instant, for either job.
    let slow = final_record(&store, &format!("slow.{run_id}")).await;
    assert_eq!(slow.status, cronrun::record::Status::Succeeded);
    assert_eq!(final_record(&store, &format!("quick.{run_id}")).await.status, cronrun::record::Status::Succeeded);
    // Their events handled and acked, none to be handed back: no notice about it is to come.
    notices_settled(&store).await;
    let about_it: Vec<_> = receiver.received().into_iter().filter(|r| r.json()["run_id"] == run_id.as_str()).collect();
    assert_eq!(about_it.len(), 1, "{about_it:#?}");
    assert!(receiver.received().iter().all(|r| r.path == "/slow"), "quick was told late");
    assert!(!events(&store, "slow", "notified").await.is_empty());
}

/// Without `allow_hosts`, a webhook leading to loopback (by address, IPv6, IPv4-mapped,
/// `0.0.0.0` or the name `localhost`) or to the cloud metadata address is refused: the
/// live receiver gets nothing, and each notice is recorded failed once, naming the address
/// and the setting, and not tried again.
#[tokio::test(flavor = "multi_thread")]
async fn webhooks_to_internal_addresses_are_refused_once_naming_the_address_without_allow_hosts() {
    let nats = Nats::start().await;
    let receiver = Receiver::start(0, 0).await;
    let agent = nats.agent_with_tables("a", "[notify]\ntimeout = \"2s\"\n");
    ready(&agent).await;
    let port = receiver.port;
    let targets = [
        ("v4", format!("http://127.0.0.1:{port}/x"), "refused: 127.0.0.1, a loopback address"),
        ("v6", format!("http://[::1]:{port}/x"), "refused: ::1, a loopback address"),
        ("mapped", format!("http://[::ffff:127.0.0.1]:{port}/x"), "refused: ::ffff:127.0.0.1, a loopback address"),
        ("metadata", "http://169.254.169.254/latest/meta-data/".to_string(), "refused: 169.254.169.254, a link-local"),
        ("any", format!("http://0.0.0.0:{port}/x"), "refused: 0.0.0.0, an unspecified address"),
        ("name", format!("http://localhost:{port}/x"), "refused: localhost resolves to "),
    ];
    let jobs: String = targets
        .iter()
        .map(|(name, url, _)| {
            format!(
                "[[job]]\nname = \"{name}\"\nschedule = \"@yearly\"\nshell = \"exit 1\"\n\
                 notify = [{{ on = [\"failed\"], webhook = \"{url}\" }}]\n"
            )
        })
        .collect();
    apply(&nats, &jobs);
    for (name, _, _) in &targets {
        nats.trigger(name);
    }
    let store = nats.store().await;
    for (name, url, needle) in &targets {
        let failed = eventually(Duration::from_secs(20), "the refused notice recorded", || async {
            events(&store, name, "notify_failed").await.into_iter().next()
        })
        .await;
        let detail = failed["detail"].as_str().unwrap();
        assert!(detail.starts_with(&format!("failed: POST {url}: {needle}")), "{name}: {detail}");
        assert!(detail.contains("[notify] allow_hosts") && detail.ends_with("(not retried)"), "{name}: {detail}");
    }
    // Retries would be of events handed back (unacked) until then: none is left.
    notices_settled(&store).await;
    for (name, _, _) in &targets {
        assert_eq!(events(&store, name, "notify_failed").await.len(), 1, "{name} was tried again");
        assert!(events(&store, name, "notified").await.is_empty(), "{name}");
    }
    assert!(receiver.received().is_empty(), "{:#?}", receiver.received());
}

/// A webhook on an allowed address that redirects to one not allowed: the redirect is not
/// followed (the receiver behind it gets nothing) and the notice is recorded refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_to_an_address_not_allowed_is_not_followed() {
    let nats = Nats::start().await;
    let receiver = Receiver::start(0, 0).await;
    let stolen = receiver.url("/stolen");
    // The allowed webhook: 127.0.0.2 (loopback too, but named in allow_hosts), answering
    // every request with a redirect to the receiver on 127.0.0.1.
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hits.clone();
    let location = stolen.clone();
    let redirect = move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let location = location.clone();
        async move { (axum::http::StatusCode::TEMPORARY_REDIRECT, [(axum::http::header::LOCATION, location)]) }
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.2", 0)).await.unwrap();
    let hook = format!("http://127.0.0.2:{}/hook", listener.local_addr().unwrap().port());
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, axum::Router::new().fallback(redirect)).await;
    });
    let agent = nats.agent_with_tables("a", "[notify]\ntimeout = \"2s\"\nallow_hosts = [\"127.0.0.2\"]\n");
    ready(&agent).await;
    apply(
        &nats,
        &format!(
            "[[job]]\nname = \"hops\"\nschedule = \"@yearly\"\nshell = \"exit 1\"\n\
             notify = [{{ on = [\"failed\"], webhook = \"{hook}\" }}]\n"
        ),
    );
    nats.trigger("hops");
    let store = nats.store().await;
    let failed = eventually(Duration::from_secs(20), "the refused notice recorded", || async {
        events(&store, "hops", "notify_failed").await.into_iter().next()
    })
    .await;
    let detail = failed["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("redirected to {stolen}: refused: 127.0.0.1, a loopback address"))
            && detail.ends_with("(not retried)"),
        "{detail}"
    );
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1, "the allowed webhook was called once");
    assert!(receiver.received().is_empty(), "the redirect was followed: {:#?}", receiver.received());
    server.abort();
}

//! A wrong clock: an agent's wall clock stepped back a minute and forward again under
//! libfaketime (Debian's `faketime`), as an NTP step or a resumed VM does, beside an agent
//! whose clock is right.

use super::*;

/// libfaketime, which `deploy/dev-deps.sh` installs.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The agent `skewed` reads its wall clock through libfaketime, from an offset in a file
/// the test rewrites: stepped back 60 s, it must see the step against the NATS server's
/// clock, say so (its log, `/readyz`, `cronrun_clock_offset_seconds`, `cronrun status`) and
/// give its shards to `good`, whose jobs go on firing; stepped forward to the right time
/// again, it leads again. Once such an agent went silent for 60 s and kept its shards.
/// Counted by the jobs themselves, every fire across both steps runs once.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_whose_clock_steps_back_gives_up_its_shards_and_every_fire_runs_once() {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "libfaketime is missing: deploy/dev-deps.sh installs it (apt-get install faketime)"
    );
    let nats = Nats::start().await;
    let store = nats.store().await;
    let names: Vec<String> = (0..6).map(|i| format!("c{i}")).collect();
    apply(&nats, &names.iter().map(|name| recording_job(name, nats.dir.path())).collect::<String>());
    let offset_file = nats.dir.path().join("skewed.offset");
    std::fs::write(&offset_file, "+0\n").unwrap();
    let port = free_port();
    let faked = [
        ("LD_PRELOAD", LIBFAKETIME),
        ("FAKETIME_TIMESTAMP_FILE", offset_file.to_str().unwrap()),
        ("FAKETIME_NO_CACHE", "1"),
        // Timers run on the monotonic clock, which a step of the wall clock leaves alone.
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    let toml = format!("http.listen = \"127.0.0.1:{port}\"\n{}", test_config("skewed"));
    let skewed = nats.agent_with_env("skewed", &toml, &faked);
    let good = nats.agent("good", "");
    for agent in [&skewed, &good] {
        ready(agent).await;
    }
    let leads = |who: &'static str| {
        let store = &store;
        move || async move {
            let holders = shard_holders(store).await;
            let n = holders.values().filter(|h| *h == who).count();
            (n > 0).then_some(n)
        }
    };
    eventually(Duration::from_secs(20), "skewed to lead shards", leads("skewed")).await;
    let from = ceil_second(Utc::now()) + chrono::Duration::seconds(1);

    // The step back, once the jobs ran the window's first two fires.
    jobs_fired_until(&names, nats.dir.path(), from + chrono::Duration::seconds(1)).await;
    std::fs::write(&offset_file, "-60\n").unwrap();
    let stepped_back = ceil_second(Utc::now());
    eventually(Duration::from_secs(15), "good to lead every shard", || async {
        let holders = shard_holders(&store).await;
        (holders.len() == TEST_SHARDS as usize && holders.values().all(|h| h == "good")).then_some(())
    })
    .await;
    let given_up = (Utc::now() - stepped_back).num_milliseconds();
    let log = skewed.log();
    // The step as measured against the server's clock: -60 s, give or take the time its
    // two reads took (-59.999 on a loaded machine).
    let step = log.split("clock stepped by ").nth(1).and_then(|rest| rest.split(' ').next()?.parse::<f64>().ok());
    assert!(step.is_some_and(|s| (s + 60.0).abs() < 0.5), "the step is logged ({step:?}):\n{log}");
    assert!(log.contains("behind the NATS server's"), "{log}");
    let (status, body) = http_get(port, "/readyz").unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("clock is +60.0 s") && body.contains("leads no shards"), "{body}");
    let offset = metric(port, "cronrun_clock_offset_seconds").unwrap();
    assert!((offset - 60.0).abs() < 1.0, "cronrun_clock_offset_seconds {offset}");
    let shown = nats.ok(&["status"]);
    assert!(shown.contains("+60.0 s OFF") && shown.contains("OFF") && shown.contains("leads no shards"), "{shown}");
    // The fires while it is off run, led by good, on the time of the server: eight
    // seconds of them since the step.
    jobs_fired_until(&names, nats.dir.path(), stepped_back + chrono::Duration::seconds(8)).await;

    // The step forward: the clock is right again.
    std::fs::write(&offset_file, "+0\n").unwrap();
    let fixed = ceil_second(Utc::now());
    eventually(Duration::from_secs(20), "skewed to lead again", leads("skewed")).await;
    assert!(skewed.log().contains("within max_clock_offset again"));
    eventually(Duration::from_secs(10), "skewed to be ready again", || async {
        (http_get(port, "/readyz")?.0 == 200).then_some(())
    })
    .await;
    // The window ends six seconds on (`fires_not_run_once` waits for it to settle).
    let to = ceil_second(Utc::now() + chrono::Duration::seconds(6)) - chrono::Duration::seconds(1);

    let secs = (to - from).num_seconds();
    let wrong = fires_not_run_once(&names, nats.dir.path(), from, secs).await;
    let mut records = Vec::new();
    for (name, at, _) in &wrong {
        records.push(stored_record(&store, &format!("{name}.{}", cronrun::record::fire_run_id(*at))).await);
    }
    assert!(
        wrong.is_empty(),
        "(job, fire, times it ran), across both steps (back at {stepped_back}, forward at {fixed}): {wrong:?}\n{records:#?}"
    );
    println!(
        "{} jobs x {secs} s, the clock stepped back 60 s and forward again: shards given up {given_up} ms after \
         the step; every fire ran once",
        names.len()
    );
}

/// Waits until every job of `names` (see `recording_job`) recorded a fire at or after `at`.
async fn jobs_fired_until(names: &[String], dir: &std::path::Path, at: chrono::DateTime<Utc>) {
    eventually(Duration::from_secs(30), &format!("every job to fire at {at}"), || async {
        names.iter().all(|name| last_fire(name, dir).is_some_and(|f| f >= at)).then_some(())
    })
    .await
}

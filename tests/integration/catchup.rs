//! Fires missed while no scheduler ran: recorded as missed, or caught up (latest or all),
//! as each job's `catchup` says.

use std::time::Duration;

use crate::support::*;
use chrono::Utc;
use cronrun::record::{Status, Trigger};

fn job(name: &str, catchup: &str) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"* * * * * *\"\nshell = \"true\"\noverlap = \"allow\"\n\
         starting_deadline = \"2s\"\ncatchup = \"{catchup}\"\nhistory = {{ succeeded = 1000, failed = 1000 }}\n\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn fires_missed_while_no_scheduler_ran_follow_each_jobs_catchup() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let nats = Nats::start().await;
    let runner = nats.agent("r", "roles = [\"runner\"]");
    let mut first = nats.agent("s1", "roles = [\"scheduler\"]");
    ready(&runner).await;
    ready(&first).await;
    apply(&nats, &[job("none", "none"), job("latest", "latest"), job("all", "all")].concat());
    let store = nats.store().await;
    for name in ["none", "latest", "all"] {
        eventually(Duration::from_secs(10), "a first run", || async {
            runs(&store, name).await.iter().any(|r| r.status == Status::Succeeded).then_some(())
        })
        .await;
    }
    // An outage: the only scheduler stops cleanly (its watermark written), none runs for 9 s.
    kill(Pid::from_raw(first.pid()), Signal::SIGTERM).unwrap();
    assert!(first.child.wait().unwrap().success());
    let stopped = Utc::now();
    tokio::time::sleep(Duration::from_secs(9)).await;
    let second = nats.agent("s2", "roles = [\"scheduler\"]");
    ready(&second).await;
    let resumed = Utc::now();
    // Fires surely more than the 2 s deadline late when the new scheduler looked at them.
    let from = ceil_second(stopped) + chrono::Duration::seconds(1);
    let to = resumed - chrono::Duration::seconds(3);
    let in_gap = |r: &&cronrun::record::RunRecord| r.scheduled_at.is_some_and(|t| t >= from && t < to);
    let gap_seconds = (to - from).num_seconds().max(0) as usize + 1;
    assert!(gap_seconds >= 3, "the outage should leave a few fires behind");

    let settled = |name: &'static str| {
        let store = store.clone();
        async move {
            eventually(Duration::from_secs(20), &format!("{name} to settle after the outage"), || async {
                let runs = runs(&store, name).await;
                let resumed_ok =
                    runs.iter().any(|r| r.scheduled_at.is_some_and(|t| t > resumed) && r.status == Status::Succeeded);
                (resumed_ok && runs.iter().filter(in_gap).all(|r| r.status.is_final())).then_some(runs)
            })
            .await
        }
    };

    let none = settled("none").await;
    let gap: Vec<_> = none.iter().filter(in_gap).collect();
    assert!(gap.len() >= gap_seconds - 1, "every missed fire is recorded: {} of ~{gap_seconds}", gap.len());
    for r in &gap {
        assert_eq!(r.status, Status::Skipped, "{r:?}");
        assert!(
            r.error.as_deref().unwrap().contains("missed: found")
                && r.error.as_deref().unwrap().contains("catchup none")
        );
    }
    assert!(nats.ok(&["runs", "none"]).contains("missed: found"));
    assert!(events(&store, "none", "missed").await.len() >= gap.len());

    let all = settled("all").await;
    let gap: Vec<_> = all.iter().filter(in_gap).collect();
    assert!(gap.len() >= gap_seconds - 1);
    for r in &gap {
        assert_eq!((r.trigger, r.status), (Trigger::Catchup, Status::Succeeded), "{r:?}");
    }

    let latest = settled("latest").await;
    let caught_up: Vec<_> = latest.iter().filter(|r| r.trigger == Trigger::Catchup).collect();
    assert_eq!(caught_up.len(), 1, "exactly the latest missed fire runs: {caught_up:?}");
    assert_eq!(caught_up[0].status, Status::Succeeded);
    for r in latest.iter().filter(in_gap).filter(|r| r.trigger != Trigger::Catchup) {
        assert_eq!(r.status, Status::Skipped);
        assert!(r.error.as_deref().unwrap().contains("catchup latest"), "{r:?}");
    }
    println!("outage of {}s: {} fires in the checked gap per job", (resumed - stopped).num_seconds(), gap_seconds);
}

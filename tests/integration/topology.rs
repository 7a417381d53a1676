//! NATS topologies beyond one cluster, each on real nats-server processes started from the
//! configs of `deploy/` (docs/deploy.md): runners on a leaf node of the
//! hub, whose link is cut and restored; two regions joined by a gateway, each with its own
//! runners, and the layout placed in one of them.

use std::time::{Duration, Instant};

use cronrun::record::Status;

use crate::procs::{group_members, pgrp_of};
use crate::support::*;

/// Agent `name`'s configuration: test timings with `top_level` before its tables and
/// `runner` at the end of `[runner]`.
fn config(name: &str, top_level: &str, runner: &str) -> String {
    format!("{top_level}\n{}{runner}\n", test_config(name))
}

/// A job of `pool` whose shell appends `<site> <run-id>` to `<dir>/<name>.ran` (the site
/// from the environment of the agent that ran it: `CRONRUN_TEST_SITE`), then `then`.
fn site_job(name: &str, pool: &str, dir: &std::path::Path, then: &str) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"@yearly\"\npool = \"{pool}\"\n\
         shell = {{ command = 'echo $CRONRUN_TEST_SITE $CRONRUN_RUN_ID >> {}/{name}.ran; {then}', inherit_env = true }}\n",
        dir.display()
    )
}

/// What job `name` of `site_job` recorded: one `(site, run-id)` per execution.
fn ran(dir: &std::path::Path, name: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(dir.join(format!("{name}.ran"))).unwrap_or_default();
    text.lines().filter_map(|l| l.split_once(' ')).map(|(site, run)| (site.into(), run.into())).collect()
}

/// The leaf's runner, `edge`: runner identity, pool `edge` only, connected to the leaf and
/// addressing the hub's JetStream through its domain.
fn edge_runner(site: &LeafSite) -> Agent {
    let top = format!("roles = [\"runner\"]\njetstream_domain = \"{HUB_DOMAIN}\"");
    let toml = config("edge", &top, "pools = [\"edge\"]");
    site.nats.agent_via(&site.leaf_url, "edge", &toml, &[("CRONRUN_TEST_SITE", "edge")])
}

/// The hub's agent, `hub`: scheduler and runner of pool `default`, connected to the hub.
async fn hub_agent(site: &LeafSite) -> Agent {
    let hub = site.nats.agent_with_env("hub", &test_config("hub"), &[("CRONRUN_TEST_SITE", "hub")]);
    ready(&hub).await;
    hub
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runner_on_a_leaf_node_runs_its_pools_jobs_and_reports_records_and_output_to_the_hub() {
    let started = Instant::now();
    let site = LeafSite::start().await;
    let _hub = hub_agent(&site).await;
    let edge = edge_runner(&site);
    ready(&edge).await;
    let dir = site.nats.dir.path();
    apply(
        &site.nats,
        &[site_job("at-edge", "edge", dir, "echo hello from the edge"), site_job("at-hub", "default", dir, "true")]
            .concat(),
    );
    let store = site.nats.store().await;
    let (at_edge, at_hub) = (site.nats.trigger("at-edge"), site.nats.trigger("at-hub"));
    for (key, job, host) in [(&at_edge, "at-edge", "edge"), (&at_hub, "at-hub", "hub")] {
        let record = final_record(&store, key).await;
        assert_eq!(record.status, Status::Succeeded, "{key}: {record:?}");
        assert_eq!(record.host.as_deref(), Some(host), "{key} ran on {:?}", record.host);
        // The job itself says where it ran: once, at its own site.
        assert_eq!(ran(dir, job), [(host.to_string(), record.run_id.clone())], "{job} recorded");
    }
    // Its output reached the hub: in the record and in the live output stream.
    let record = final_record(&store, &at_edge).await;
    assert!(record.output.iter().any(|l| l.contains("hello from the edge")), "{:?}", record.output);
    let logs = site.nats.ok(&["logs", &at_edge]);
    assert!(logs.contains("hello from the edge"), "cronrun logs: {logs}");
    // The CLI on the edge reads it too, through the hub's domain; without it, JetStream
    // is out of its reach (the leaf link denies `$JS.API.>`).
    let on_edge = |domain: Option<&str>| {
        let mut command = site.nats.command();
        command.env("CRONRUN_NATS", &site.leaf_url).args(["logs", &at_edge]);
        match domain {
            Some(domain) => command.env("CRONRUN_JETSTREAM_DOMAIN", domain),
            None => command.env_remove("CRONRUN_JETSTREAM_DOMAIN"),
        };
        command.output().unwrap()
    };
    let out = on_edge(Some(HUB_DOMAIN));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains("hello from the edge"), "{said} {:?}", out.stderr);
    let out = on_edge(None);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("--jetstream-domain"), "without the domain: {said}");
    println!("leaf site: edge and hub runs each ran once, where their pool is, in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leaf_link_that_drops_loses_the_edge_run_stops_its_process_and_nothing_runs_twice_when_it_returns() {
    let started = Instant::now();
    let site = LeafSite::start().await;
    let _hub = hub_agent(&site).await;
    let edge = edge_runner(&site);
    ready(&edge).await;
    let dir = site.nats.dir.path();
    // The long run writes its shell's pid first (`$$`), then waits for a file never made.
    let pidfile = dir.join("long.pid");
    let long = site_job(
        "long",
        "edge",
        dir,
        &format!("echo $$ > {}; until [ -e {}/never ]; do sleep 0.1; done", pidfile.display(), dir.display()),
    );
    apply(&site.nats, &[long, site_job("after", "edge", dir, "true")].concat());
    let store = site.nats.store().await;
    let key = site.nats.trigger("long");
    eventually(Duration::from_secs(10), "the long run to run on the edge", || async {
        let (job, run) = cronrun::record::parse_run_key(&key).unwrap();
        let r = store.get_run(job, run).await.ok()?.record;
        (r.status == Status::Running && r.host.as_deref() == Some("edge")).then_some(())
    })
    .await;
    let shell: i32 = eventually(Duration::from_secs(5), "the long run's shell", || async {
        std::fs::read_to_string(&pidfile).ok()?.trim().parse().ok()
    })
    .await;
    let group = pgrp_of(shell);
    eventually(Duration::from_secs(5), "supervisor, shell and its sleep in one group", || async {
        (group_members(group).len() >= 3).then_some(())
    })
    .await;

    let cut = Instant::now();
    site.link.cut();
    // Its renewals cross the link no more: the supervisor kills the run 2.5 heartbeats
    // (2.5 s) after the last one, before the lease (3 s) expires.
    eventually(Duration::from_secs(10), "the edge run's processes to be killed", || async {
        (!alive(shell) && group_members(group).is_empty()).then_some(())
    })
    .await;
    let killed_after = cut.elapsed();
    assert!(!site.linked().await, "the leaf still reaches the hub's JetStream after the cut");
    // The hub sees the lease expire and marks the run lost (no retries: the job's policy).
    let lost = final_record(&store, &key).await;
    let lost_after = cut.elapsed();
    assert_eq!(lost.status, Status::Lost, "{lost:?}");
    assert_eq!(lost.attempt, 1);
    assert!(killed_after < lost_after, "the run lived until {killed_after:?}, past its loss at {lost_after:?}");

    site.link.restore();
    eventually(Duration::from_secs(30), "the leaf to link to the hub again", || async {
        site.linked().await.then_some(())
    })
    .await;
    // The edge runner takes runs again; the long run's dispatch message, never acked while
    // the link was down, comes back to it and is settled without running it again: the
    // queue empties.
    let after = site.nats.trigger("after");
    assert_eq!(final_record(&store, &after).await.status, Status::Succeeded);
    let dispatch = store.names.dispatch_stream();
    eventually(Duration::from_secs(30), "the dispatch queue to be settled", || async {
        let mut stream = store.js.get_stream(&dispatch).await.ok()?;
        (stream.info().await.ok()?.state.messages == 0).then_some(())
    })
    .await;
    assert_eq!(ran(dir, "long"), [("edge".to_string(), lost.run_id.clone())], "the long run ran once");
    assert_eq!(final_record(&store, &key).await.status, Status::Lost, "the record was rewritten");
    assert_eq!(runs(&store, "long").await.len(), 1, "one run of long");
    println!(
        "leaf link cut: run killed after {killed_after:?}, lost after {lost_after:?}; whole test {:?}",
        started.elapsed()
    );
}

/// East's agent, `east`: scheduler and runner of pool `default`, which creates the layout
/// with `layout` (a `[layout]` table's lines).
fn east_agent(sc: &Supercluster, layout: &str) -> Agent {
    let toml = format!("{}\n[layout]\n{layout}\n", test_config("east"));
    sc.nats.agent_with_env("east", &toml, &[("CRONRUN_TEST_SITE", "east")])
}

/// West's runner, `west`: runner identity, pool `west` only, connected to the west region.
fn west_runner(sc: &Supercluster) -> Agent {
    let toml = config("west", "roles = [\"runner\"]", "pools = [\"west\"]");
    sc.nats.agent_via(&sc.west.url, "west", &toml, &[("CRONRUN_TEST_SITE", "west")])
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_supercluster_a_pool_served_only_in_the_west_runs_there_and_the_layout_is_placed_by_tags() {
    let started = Instant::now();
    let sc = Supercluster::start().await;
    // The layout is placed in the west by its tag, though its creator is connected to
    // the east (where JetStream would place it by default).
    let east = east_agent(&sc, "placement_tags = [\"region:west\"]");
    ready(&east).await;
    let west = west_runner(&sc);
    ready(&west).await;
    let dir = sc.nats.dir.path();
    apply(
        &sc.nats,
        &[site_job("in-west", "west", dir, "echo hello from the west"), site_job("in-east", "default", dir, "true")]
            .concat(),
    );
    let store = sc.nats.store().await;
    // Several runs each: a pool's runs never go to the other region's runner.
    let mut keys = Vec::new();
    for _ in 0..3 {
        keys.push((sc.nats.trigger("in-west"), "in-west", "west"));
        keys.push((sc.nats.trigger("in-east"), "in-east", "east"));
    }
    for (key, _, host) in &keys {
        let record = final_record(&store, key).await;
        assert_eq!(record.status, Status::Succeeded, "{key}: {record:?}");
        assert_eq!(record.host.as_deref(), Some(*host), "{key} ran on {:?}", record.host);
    }
    for (job, site) in [("in-west", "west"), ("in-east", "east")] {
        let mut recorded: Vec<(String, String)> = ran(dir, job);
        recorded.sort();
        let mut expected: Vec<(String, String)> = keys
            .iter()
            .filter(|(_, j, _)| *j == job)
            .map(|(key, _, _)| (site.to_string(), key.split_once('.').unwrap().1.to_string()))
            .collect();
        expected.sort();
        assert_eq!(recorded, expected, "{job}: each run ran once, in the {site}");
    }
    // Every stream of the account (the layout and what the scheduler made beside it) is
    // held by the west's server.
    let client = cronrun::connect::connect(&sc.west.url, Some(&sc.nats.identity("test")), "test").await.unwrap();
    let js = async_nats::jetstream::new(client);
    let names: Vec<String> =
        futures::StreamExt::collect::<Vec<_>>(js.stream_names()).await.into_iter().map(Result::unwrap).collect();
    assert!(names.iter().any(|n| n == "KV_cronrun_runs") && names.len() >= 8, "{names:?}");
    for name in &names {
        let info = js.get_stream(name).await.unwrap().info().await.unwrap().clone();
        let cluster = info.cluster.as_ref().and_then(|c| c.name.clone());
        assert_eq!(cluster.as_deref(), Some("west"), "{name} is in {cluster:?}");
        assert_eq!(info.config.placement.map(|p| p.tags), Some(vec!["region:west".to_string()]), "{name}");
    }
    println!(
        "supercluster: {} runs in their regions, {} streams in the west, in {:?}",
        keys.len(),
        names.len(),
        started.elapsed()
    );
}

/// Every nats-server config of `deploy/` parses (`nats-server -t`), with the environment
/// variables its secrets come from, and is refused without them.
#[test]
fn the_deploy_configs_of_leaf_nodes_and_superclusters_parse_and_need_their_secrets() {
    let dir = test_dir();
    secure(dir.path());
    let env = [
        ("CRONRUN_LEAF_PASSWORD", "p"),
        ("CRONRUN_LEAF_URL", "nats-leaf://cronrun-leaf:p@hub:7422"),
        ("CRONRUN_GATEWAY_PASSWORD", "p"),
        ("CRONRUN_GATEWAY_EAST_URL", "nats://cronrun-gateway:p@east:7222"),
        ("CRONRUN_GATEWAY_WEST_URL", "nats://cronrun-gateway:p@west:7222"),
    ];
    for file in ["leaf/hub.conf", "leaf/leaf.conf", "supercluster/east.conf", "supercluster/west.conf"] {
        let conf = dir.path().join(file.replace('/', "-"));
        std::fs::create_dir_all(dir.path().join("cronrun")).unwrap();
        std::fs::write(dir.path().join("cronrun/auth.conf"), secure(dir.path()).0).unwrap();
        std::fs::write(&conf, deploy_file(file)).unwrap();
        let test = |with_env: bool| {
            let mut command = std::process::Command::new(cronrun::embedded::find_binary().unwrap());
            command.arg("-t").arg("-c").arg(&conf);
            for (k, v) in env {
                command.env_remove(k);
                if with_env {
                    command.env(k, v);
                }
            }
            command.output().unwrap()
        };
        let out = test(true);
        assert!(out.status.success(), "{file}: {}", String::from_utf8_lossy(&out.stderr));
        let out = test(false);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && said.contains("variable reference"), "{file} without its secrets: {said}");
    }
}

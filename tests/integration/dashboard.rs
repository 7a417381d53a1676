//! The dashboard in a real headless Chromium against real agents and nats-server: the
//! login, the jobs table (paging, search, filters), a job (pause, trigger), a run whose
//! output arrives live while it runs, then its kill; the status page. A viewer's
//! dashboard shows no buttons and its API refuses actions; hostile requests are refused.

use std::time::Duration;

use crate::support::*;

/// A dashboard agent's `[http]` table: a login token, the viewer identity to read, and
/// the admin identity when `admin`.
fn dashboard_agent(nats: &Nats, name: &str, port: u16, admin: bool) -> (Agent, String) {
    let token = format!("{name}-token-0123456789abcdef");
    let token_file = nats.dir.path().join(format!("{name}.token"));
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let mut table = format!(
        "[http]\nlisten = \"127.0.0.1:{port}\"\ntoken_file = {:?}\nviewer_creds = {:?}\n",
        token_file.display().to_string(),
        nats.identity("viewer")
    );
    if admin {
        table.push_str(&format!("admin_creds = {:?}\n", nats.identity("admin")));
    }
    (nats.agent_with_tables(name, &table), token)
}

/// The job names the jobs table shows now.
async fn shown_jobs(browser: &Browser) -> Vec<String> {
    let script = "return [...document.querySelectorAll('#jobs tr[data-job]')].map(r => r.dataset.job)";
    let names = browser.client.execute(script, vec![]).await.unwrap();
    serde_json::from_value(names).unwrap()
}

async fn jobs_shown_become(browser: &Browser, what: &str, expected: &[&str]) {
    eventually(Duration::from_secs(20), what, || async { (shown_jobs(browser).await == expected).then_some(()) }).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_shows_jobs_and_live_output_and_acts_for_an_admin() {
    let nats = Nats::start().await;
    let port = free_port();
    let (agent, token) = dashboard_agent(&nats, "a", port, true);
    ready(&agent).await;
    let bulk: String = (0..60)
        .map(|i| format!("[[job]]\nname = \"bulk-{i:02}\"\nschedule = \"@yearly\"\nshell = \"true\"\n"))
        .collect();
    let jobs = nats.dir.path().join("jobs.toml");
    std::fs::write(&jobs, bulk).unwrap();
    nats.ok(&["apply", "--file", jobs.to_str().unwrap()]);
    nats.ok(&["add", "ok", "--schedule", "0 30 2 * * *", "--tz", "Europe/Paris", "--", "echo '<b>bold</b> & \"q\"'"]);
    nats.ok(&["add", "bad", "--schedule", "@yearly", "--", "echo oops >&2; exit 3"]);
    nats.ok(&["add", "live", "--schedule", "@yearly", "--", "echo first; sleep 1.5; echo second >&2; sleep 60"]);
    let ok_run = nats.trigger("ok");
    assert!(!nats.cli(&["trigger", "bad", "--wait"]).status.success());
    let store = nats.store().await;
    final_record(&store, &ok_run).await;

    let browser = Browser::start().await;
    let base = format!("http://127.0.0.1:{port}");
    // No session: the login form; a wrong token is refused.
    browser.goto(&format!("{base}/")).await;
    browser.text("#login").await;
    assert_eq!(http_request(port, "GET", "/login?token=wrong", &[], "").0, 401);
    browser.client.find(fantoccini::Locator::Css("#token")).await.unwrap().send_keys(&token).await.unwrap();
    browser.click("#login button").await;
    assert_eq!(browser.text("#whoami").await, "admin");

    // The jobs table: paging, in words, last status, search and filters.
    let count = browser.text_until("#count", "63 jobs counted", |t| t.contains("of 63")).await;
    assert!(count.starts_with("1–50"), "{count}");
    let first_page = shown_jobs(&browser).await;
    assert_eq!(first_page.len(), 50);
    assert_eq!(first_page[..2], ["bad", "bulk-00"]);
    browser.screenshot("dashboard-jobs").await;
    browser.click("#next").await;
    jobs_shown_become(
        &browser,
        "the second page",
        &[
            "bulk-49", "bulk-50", "bulk-51", "bulk-52", "bulk-53", "bulk-54", "bulk-55", "bulk-56", "bulk-57",
            "bulk-58", "bulk-59", "live", "ok",
        ],
    )
    .await;
    // The page refreshes every 5 s; the dashboard's view of runs follows the runs bucket.
    let ok_row = browser.text_until("#jobs tr[data-job=\"ok\"]", "ok's last run", |t| t.contains("succeeded")).await;
    assert!(ok_row.contains("every day at 02:30") && ok_row.contains("02:30:00 CE"), "{ok_row}");
    assert!(ok_row.contains("100%"), "{ok_row}");
    browser.goto(&format!("{base}/#/jobs?q=ULK-0")).await;
    let bulk_0x: Vec<String> = (0..10).map(|i| format!("bulk-0{i}")).collect();
    let bulk_0x: Vec<&str> = bulk_0x.iter().map(String::as_str).collect();
    jobs_shown_become(&browser, "the search's jobs", &bulk_0x).await;
    browser.goto(&format!("{base}/#/jobs?filter=failing")).await;
    jobs_shown_become(&browser, "the failing job", &["bad"]).await;
    let bad_row = browser.text("#jobs tr[data-job=\"bad\"]").await;
    assert!(bad_row.contains("failed") && bad_row.contains("0%"), "{bad_row}");

    // An admin's dashboard acts only for a session that sent the header.
    for (path, headers) in [
        ("/api/jobs/ok/trigger", vec!["X-Cronrun: 1"]),
        ("/api/jobs/ok/pause", vec!["X-Cronrun: 1", "Cookie: cronrun_session=1.00"]),
        (&format!("/api/runs/ok/{}/kill", ok_run.split_once('.').unwrap().1), vec!["X-Cronrun: 1"]),
    ] {
        let (code, body) = http_request(port, "POST", path, &headers, "{}");
        assert_eq!(code, 401, "{path}: {body}");
    }

    // A run's record and output, markup shown as text.
    let (_, ok_id) = cronrun::record::parse_run_key(&ok_run).unwrap();
    browser.goto(&format!("{base}/#/run/ok/{ok_id}")).await;
    assert_eq!(browser.text_until("#run-status", "ok's status", |t| t == "succeeded").await, "succeeded");
    browser.text_until("#output", "ok's output", |t| t.contains(r#"<b>bold</b> & "q""#)).await;
    assert!(!browser.has("#output b").await, "output became markup");
    assert!(!browser.has("#kill").await, "a run that ended has no kill button");

    // Pause from the job's page: the spec says so, and the paused filter shows it.
    browser.goto(&format!("{base}/#/job/ok")).await;
    browser.text_until("#runs", "ok's run", |t| t.contains(ok_id)).await;
    browser.click("#pause").await;
    eventually(Duration::from_secs(10), "ok paused", || async {
        store.get_job("ok").await.ok()?.spec.ok()?.paused.then_some(())
    })
    .await;
    browser.text("#resume").await;
    browser.screenshot("dashboard-job").await;
    browser.goto(&format!("{base}/#/jobs?filter=paused")).await;
    jobs_shown_become(&browser, "the paused job", &["ok"]).await;

    // Trigger from the job's page: the run's page follows its output live, then kills it.
    browser.goto(&format!("{base}/#/job/live")).await;
    browser.click("#trigger").await;
    let url = eventually(Duration::from_secs(10), "the new run's page", || async {
        let url = browser.client.current_url().await.ok()?;
        url.fragment().filter(|f| f.starts_with("/run/live/")).map(str::to_string)
    })
    .await;
    let run_id = url.trim_start_matches("/run/live/").to_string();
    browser.text_until("#output", "the first line", |t| t.contains("first")).await;
    // Only the live stream marks standard error; the record's tail the page falls back on does not.
    browser.text_until("#output span.stderr", "a line printed while the page is open", |t| t == "second").await;
    // The record (polled every 2 s) may still say queued when the stream's lines arrive.
    browser.text_until("#run-status", "the page to show the run running", |t| t == "running").await;
    let record = store.get_run("live", &run_id).await.unwrap().record;
    assert_eq!(record.status, cronrun::record::Status::Running);
    browser.screenshot("dashboard-run").await;
    browser.client.execute("window.confirm = () => true", vec![]).await.unwrap();
    browser.click("#kill").await;
    let ended = browser.text_until("#run-status", "the killed run's end", |t| t != "running").await;
    let record = final_record(&store, &format!("live.{run_id}")).await;
    assert_eq!(ended, record.status.as_str());
    assert!(events(&store, "live", "kill_requested").await.iter().any(|e| e["run_id"] == run_id.as_str()));

    // Status: the runner and the scheduler with its shards.
    browser.goto(&format!("{base}/#/status")).await;
    let runners = browser.text_until("#runners", "the runner", |t| t.contains("default")).await;
    assert!(runners.lines().any(|l| l.starts_with("a ")), "{runners}");
    assert!(browser.text("#schedulers").await.contains("a/"));
    let shards = browser.text("#shards").await;
    assert!(shards.contains(&format!("0-{}", TEST_SHARDS - 1)), "{shards}");
    assert!(!browser.has(".warning").await, "every shard is led and every pool served");
    browser.screenshot("dashboard-status").await;
    browser.client.clone().close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_viewer_sees_no_buttons_and_hostile_requests_are_refused() {
    let nats = Nats::start().await;
    let port = free_port();
    let (viewer, token) = dashboard_agent(&nats, "v", port, false);
    let local_port = free_port();
    let local = nats.agent_with_tables("l", &format!("[http]\nlisten = \"127.0.0.1:{local_port}\"\n"));
    for agent in [&viewer, &local] {
        ready(agent).await;
    }
    nats.ok(&["add", "ok", "--schedule", "@yearly", "--", "true"]);

    let browser = Browser::start().await;
    browser.goto(&format!("http://127.0.0.1:{port}/login?token={token}")).await;
    assert_eq!(browser.text("#whoami").await, "viewer");
    browser.goto(&format!("http://127.0.0.1:{port}/#/job/ok")).await;
    browser.text_until("#spec", "ok's spec", |t| t.contains("\"name\": \"ok\"")).await;
    for button in ["#pause", "#resume", "#trigger"] {
        assert!(!browser.has(button).await, "a viewer sees {button}");
    }
    browser.client.clone().close().await.unwrap();

    let cookie = login_cookie(port, &token);
    let session = format!("Cookie: {cookie}");
    let (name, value) = cookie.split_once('=').unwrap();
    let (issued, mac) = value.split_once('.').unwrap();
    assert_eq!(name, format!("cronrun_session_{port}"), "one cookie per dashboard port");
    let tampered = format!("Cookie: {name}={}.{mac}", issued.parse::<i64>().unwrap() + 1);
    let other_port = format!("Cookie: cronrun_session_{local_port}={value}");
    let short = format!("Cookie: {name}=00");
    let json = "Content-Type: application/json";
    let cases: [(&str, u16, &str, Vec<&str>, &str); 9] = [
        ("no session", port, "/api/jobs", vec![], "log in"),
        ("a forged cookie", port, "/api/jobs", vec![&short], "log in"),
        ("a cookie with its time changed", port, "/api/jobs", vec![&tampered], "log in"),
        ("another port's cookie", port, "/api/jobs", vec![&other_port], "log in"),
        ("a wildcard job name", port, "/api/jobs/a*b", vec![&session], "job name"),
        ("a run id with a dot", port, "/api/runs/ok/x.y", vec![&session], "run id"),
        ("a job that does not exist", port, "/api/jobs/nope", vec![&session], "nope"),
        ("no token, even on loopback", local_port, "/api/jobs", vec![], "token_file"),
        ("a login without a token file", local_port, "/login?token=anything-at-all-16", vec![], "token_file"),
    ];
    let expected_codes = [401, 401, 401, 401, 400, 400, 404, 403, 403];
    for ((what, port, path, headers, says), code) in cases.into_iter().zip(expected_codes) {
        let (got, body) = http_request(port, "GET", path, &headers, "");
        assert_eq!(got, code, "{what}: {body}");
        assert!(body.contains(says), "{what}: {body}");
    }
    // Actions: refused to a viewer, to a request without the header, and without a token.
    let posts = [
        (port, vec![session.as_str(), json, "X-Cronrun: 1"], 403, "read-only"),
        (port, vec![session.as_str(), json], 403, "X-Cronrun"),
        (local_port, vec![json, "X-Cronrun: 1"], 403, "token_file"),
    ];
    for (port, headers, code, says) in posts {
        let (got, body) = http_request(port, "POST", "/api/jobs/ok/trigger", &headers, "{}");
        assert_eq!((got, body.contains(says)), (code, true), "{headers:?}: {body}");
    }
    let store = nats.store().await;
    assert!(runs(&store, "ok").await.is_empty(), "a refused trigger ran");

    // An admin identity that cannot connect does not hold up reading; actions wait for it.
    let bad_port = free_port();
    let token_file = nats.dir.path().join("v.token");
    let missing = nats.dir.path().join("no-such-admin.nk");
    let table = format!(
        "[http]\nlisten = \"127.0.0.1:{bad_port}\"\ntoken_file = {:?}\nadmin_creds = {:?}\n",
        token_file.display().to_string(),
        missing.display().to_string()
    );
    let bad_admin = nats.agent_with_tables("b", &table);
    ready(&bad_admin).await;
    let bad_session = format!("Cookie: {}", login_cookie(bad_port, &token));
    eventually(Duration::from_secs(20), "the dashboard to read without its admin", || async {
        let (code, body) = http_request(bad_port, "GET", "/api/jobs", &[&bad_session], "");
        (code == 200 && body.contains("\"ok\"")).then_some(())
    })
    .await;
    let headers = [bad_session.as_str(), json, "X-Cronrun: 1"];
    let (code, body) = http_request(bad_port, "POST", "/api/jobs/ok/trigger", &headers, "{}");
    assert_eq!((code, body.contains("connecting")), (503, true), "{body}");
    assert!(bad_admin.log().contains("the dashboard cannot connect yet"), "{}", bad_admin.log());

    // Status names a pool that jobs use and no runner serves.
    nats.ok(&["add", "typo", "--schedule", "@yearly", "--pool", "nosuch", "--", "true"]);
    let status = eventually(Duration::from_secs(20), "the unserved pool in status", || async {
        let (code, body) = http_request(port, "GET", "/api/status", &[&session], "");
        (code == 200 && body.contains("nosuch")).then_some(body)
    })
    .await;
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["unserved_pools"], serde_json::json!([{ "pool": "nosuch", "jobs": 1 }]));
}

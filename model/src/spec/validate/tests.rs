//! The checks of `validate.rs`, field by field, with the messages they give.

use super::*;
use crate::error::ErrorKind;

fn field_of(json: &str) -> String {
    match JobSpec::from_json(json.as_bytes()).unwrap_err().kind() {
        ErrorKind::Invalid { field } => field.clone(),
        other => panic!("not an invalid-input error: {other:?}"),
    }
}

#[test]
fn minimal_spec_gets_defaults() {
    let spec = JobSpec::from_json(br#"{"name":"a","schedule":"* * * * *","shell":"true"}"#).unwrap();
    assert_eq!(spec.timezone, "UTC");
    assert_eq!(spec.pool, "default");
    assert_eq!(spec.output_lines, 100);
    assert_eq!(spec.shell.unwrap().command.as_deref(), Some("true"));
}

#[test]
fn round_trips_through_json() {
    let json = br#"{"name":"a","schedule":"*/5 * * * *","timezone":"Europe/Berlin",
            "shell":{"argv":["echo","hi"],"env":{"A":"1"},"cwd":"/tmp"},"timeout":"1m30s",
            "overlap":"queue","lock":"db","catchup":"latest","retries":{"max":2,"backoff":"5s"},
            "labels":{"team":"ops"}}"#;
    let spec = JobSpec::from_json(json).unwrap();
    let again = JobSpec::from_json(&spec.to_json().unwrap()).unwrap();
    assert_eq!(spec, again);
    assert_eq!(spec.timeout, Some(Duration::from_secs(90)));
    assert_eq!(spec.lock_name(), Some("db"));
}

/// Stored, a spec holds what was set: each field at its default is left out, each set
/// otherwise is kept, and reading fills the defaults in again. Shown (`Serialize`
/// outside of `to_json`), it holds every field.
#[test]
fn a_stored_spec_leaves_out_each_field_at_its_default_and_reads_back_the_same() {
    let base = r#""name":"a","schedule":"* * * * *","shell":{"command":"true"}"#;
    let plain = JobSpec::from_json(format!("{{{base}}}").as_bytes()).unwrap();
    assert_eq!(&plain.to_json().unwrap()[..], format!("{{{base}}}").as_bytes());
    let shown = serde_json::to_value(&plain).unwrap();
    let defaulted = [
        "timezone",
        "dst",
        "overlap",
        "lock",
        "catchup",
        "catchup_window",
        "retries",
        "jitter",
        "pool",
        "paused",
        "history",
        "output_lines",
    ];
    for field in defaulted {
        assert!(shown.get(field).is_some(), "{field} is not shown");
    }
    let set = [
        ("timezone", r#""Europe/Berlin""#),
        ("dst", r#""skip""#),
        ("dst", r#""twice""#),
        ("overlap", r#""queue""#),
        ("lock", r#""db""#),
        ("catchup", r#""latest""#),
        ("catchup_window", r#""2h""#),
        ("retries", r#"{"max":1,"backoff":"10s"}"#),
        ("retries", r#"{"max":0,"backoff":"1m"}"#),
        ("jitter", r#""5s""#),
        ("pool", r#""gpu""#),
        ("paused", "true"),
        ("history", r#"{"succeeded":10,"failed":3}"#),
        ("output_lines", "7"),
    ];
    for (field, value) in set {
        let spec = JobSpec::from_json(format!("{{{base},\"{field}\":{value}}}").as_bytes()).unwrap();
        let stored: serde_json::Value = serde_json::from_slice(&spec.to_json().unwrap()).unwrap();
        assert_eq!(stored.get(field), Some(&serde_json::from_str(value).unwrap()), "{field} = {value}");
        assert_eq!(stored.as_object().unwrap().len(), 4, "{field} = {value}: {stored}");
        assert_eq!(JobSpec::from_json(&spec.to_json().unwrap()).unwrap(), spec, "{field} = {value}");
    }
    let wasm = |grant: &str| {
        let json =
            format!(r#"{{"name":"w","schedule":"@hourly","wasm":{{"plugin":"sha256-{}"{grant}}}}}"#, "0".repeat(64));
        JobSpec::from_json(json.as_bytes()).unwrap().to_json().unwrap()
    };
    assert!(!String::from_utf8_lossy(&wasm("")).contains("allow_kv"));
    assert!(String::from_utf8_lossy(&wasm(r#","allow_kv":true"#)).contains(r#""allow_kv":true"#));
}

/// `dst` is read by name, refused otherwise in one line that names the field and the
/// three choices, and reaches the schedule every fire of the job is computed from.
#[test]
fn dst_is_one_of_three_names_and_the_jobs_schedule_fires_by_it() {
    let with = |dst: &str| {
        JobSpec::from_json(format!(r#"{{"name":"a","schedule":"30 2 * * *","shell":"x","dst":{dst}}}"#).as_bytes())
    };
    for (written, dst) in [
        ("\"debian\"", cronrun_time::Dst::Debian),
        ("\"skip\"", cronrun_time::Dst::Skip),
        ("\"twice\"", cronrun_time::Dst::Twice),
    ] {
        let spec = with(written).unwrap();
        assert_eq!((spec.dst, spec.parsed_schedule().unwrap().0.dst()), (dst, dst), "{written}");
    }
    for bad in ["\"sometimes\"", "\"Skip\"", "1", "null"] {
        let err = with(bad).unwrap_err().to_string();
        assert!(err.starts_with("dst: ") && !err.contains('\n'), "{bad}: {err}");
        assert!(
            !bad.starts_with('"') || err.contains("\"debian\" (the default), \"skip\" or \"twice\""),
            "{bad}: {err}"
        );
    }
}

#[test]
fn lock_true_means_own_name() {
    let spec = JobSpec::from_json(br#"{"name":"a","schedule":"@hourly","shell":"x","lock":true}"#).unwrap();
    assert_eq!(spec.lock_name(), Some("a"));
    assert!(spec.to_json().unwrap().windows(11).any(|w| w == b"\"lock\":true"));
}

#[test]
fn errors_name_the_field() {
    let base = r#""name":"a","schedule":"* * * * *","shell":"true""#;
    assert_eq!(field_of(&format!("{{{base},\"colour\":1}}")), "colour");
    assert_eq!(field_of(&format!("{{{base},\"timeout\":\"soon\"}}")), "timeout");
    assert_eq!(field_of(&format!("{{{base},\"overlap\":\"never\"}}")), "overlap");
    assert_eq!(field_of(&format!("{{{base},\"dst\":\"sometimes\"}}")), "dst");
    assert_eq!(field_of(&format!("{{{base},\"retries\":{{\"max\":1,\"x\":2}}}}")), "retries.x");
    assert_eq!(field_of(&format!("{{{base},\"retries\":{{\"max\":-1}}}}")), "retries.max");
    assert_eq!(field_of(&format!("{{{base},\"timezone\":\"Mars/Olympus\"}}")), "timezone");
    assert_eq!(field_of(&format!("{{{base},\"pool\":\"a.b\"}}")), "pool");
    assert_eq!(field_of(r#"{"name":"a b","schedule":"* * * * *","shell":"x"}"#), "name");
    assert_eq!(field_of(r#"{"name":"a","schedule":"61 * * * *","shell":"x"}"#), "schedule");
    assert_eq!(field_of(r#"{"name":"a","schedule":"* * * * *"}"#), "shell");
    assert_eq!(field_of(r#"{"name":"a","schedule":"* * * * *","shell":{"command":"x","argv":["y"]}}"#), "shell");
    assert_eq!(field_of(r#"{"name":"a","schedule":"* * * * *","shell":{"cmd":"x"}}"#), "shell.cmd");
    assert_eq!(field_of(r#"{"name":"a","schedule":"* * * * *","wasm":{"plugin":"abc"}}"#), "wasm.plugin");
    assert_eq!(field_of("not json"), "spec");
    // NUL, which JSON carries as \u0000 and no process accepts.
    assert_eq!(field_of(r#"{"name":"a","schedule":"* * * * *","shell":"true\u0000"}"#), "shell.command");
    assert_eq!(field_of(r#"{"name":"a","schedule":"* * * * *","shell":{"argv":["a","b\u0000"]}}"#), "shell.argv");
    assert_eq!(
        field_of(r#"{"name":"a","schedule":"* * * * *","shell":{"command":"x","env":{"A":"\u0000"}}}"#),
        "shell.env.A"
    );
    assert_eq!(
        field_of(r#"{"name":"a","schedule":"* * * * *","shell":{"command":"x","cwd":"/t\u0000"}}"#),
        "shell.cwd"
    );
    let counting = r#""notify":[{"on":["recovered"],"webhook":"https://h/x"}]"#;
    assert_eq!(field_of(&format!("{{{base},{counting},\"history\":{{\"succeeded\":0}}}}")), "notify[0]");
    assert_eq!(
        field_of(&format!("{{{base},\"notify\":[{{\"on\":[\"failed\"],\"webhook\":\"https://h/x\",\"after\":11}}]}}")),
        "notify[0].after"
    );
    JobSpec::from_json(format!("{{{base},{counting}}}").as_bytes()).unwrap();
}

#[test]
fn user_and_group_are_account_names_or_numbers() {
    let spec = |shell: &str| format!(r#"{{"name":"a","schedule":"* * * * *","shell":{shell}}}"#);
    for good in [r#"{"command":"x","user":"backup","group":"adm"}"#, r#"{"command":"x","user":"1000"}"#] {
        JobSpec::from_json(spec(good).as_bytes()).unwrap();
    }
    for (bad, field) in [
        (r#"{"command":"x","user":""}"#, "shell.user"),
        (r#"{"command":"x","user":"root;id"}"#, "shell.user"),
        (r#"{"command":"x","user":"-rf"}"#, "shell.user"),
        (r#"{"command":"x","user":"99999999999"}"#, "shell.user"),
        (r#"{"command":"x","user":"a*"}"#, "shell.user"),
        (r#"{"command":"x","group":"wheel>"}"#, "shell.group"),
    ] {
        assert_eq!(field_of(&spec(bad)), field, "{bad}");
    }
    let long = format!(r#"{{"command":"x","user":"{}"}}"#, "u".repeat(33));
    assert_eq!(field_of(&spec(&long)), "shell.user");
}

#[test]
fn absurd_durations_and_sizes_are_refused_naming_the_field() {
    let base = r#""name":"a","schedule":"* * * * *","shell":"true""#;
    for (extra, field) in [
        (r#""jitter":"2000000years""#, "jitter"),
        (r#""jitter":"25h""#, "jitter"),
        (r#""starting_deadline":"31days""#, "starting_deadline"),
        (r#""catchup_window":"5000000years""#, "catchup_window"),
        (r#""retries":{"max":1,"backoff":"1000000years"}"#, "retries.backoff"),
        (r#""timeout":"1000000000years""#, "timeout"),
        (r#""run_ttl":"2h""#, "run_ttl"),
    ] {
        let json = format!("{{{base},{extra}}}");
        assert_eq!(field_of(&json), field, "{extra}");
        let message = JobSpec::from_json(json.as_bytes()).unwrap_err().to_string();
        assert!(message.contains("over the limit of"), "{message}");
    }
    // The limits themselves are accepted.
    let at_limits = format!(
        r#"{{{base},"jitter":"1day","timeout":"30days","starting_deadline":"30days","catchup_window":"30days","retries":{{"max":1,"backoff":"1day"}}}}"#
    );
    JobSpec::from_json(at_limits.as_bytes()).unwrap();
    // A spec too large to keep: one line, naming the size.
    let huge = format!(r#"{{"name":"a","schedule":"* * * * *","shell":"{}"}}"#, "x".repeat(MAX_SPEC_BYTES));
    assert_eq!(field_of(&huge), "spec");
    // Characters JSON escapes (quotes, control characters) count at their escaped size.
    let escaped =
        format!(r#"{{"name":"a","schedule":"* * * * *","shell":"{}"}}"#, "\\u0001".repeat(MAX_SPEC_BYTES / 5));
    assert_eq!(field_of(&escaped), "spec");
}

#[test]
fn a_stored_spec_read_once_is_judged_as_from_json_judges_it() {
    // Read once: the same spec as `from_json`, and the schedule its validation parsed.
    let json = r#"{"name":"a","schedule":"*/5 * * * *","timezone":"Europe/Berlin","shell":"true"}"#;
    let (spec, (schedule, tz)) = JobSpec::from_json_checked(json.as_bytes()).unwrap();
    assert_eq!(spec, JobSpec::from_json(json.as_bytes()).unwrap());
    assert_eq!((schedule.expr(), tz), ("*/5 * * * *", chrono_tz::Europe::Berlin));
    assert_eq!(spec.encoded_len(), serde_json::to_vec(&spec).unwrap().len());
    // A refusal still names the field, from the decoder that tracks the path.
    let bad = JobSpec::from_json_checked(br#"{"name":"a","schedule":"* * * * *","shell":"x","retries":{"max":"x"}}"#);
    assert!(matches!(bad.unwrap_err().kind(), ErrorKind::Invalid { field } if field == "retries.max"));
    // The size is the spec's as it encodes, whoever reads it: padding that encodes
    // away does not count, characters that encode long do.
    let padded = format!(r#"{{"name":"a","schedule":"* * * * *","shell":"true"{}}}"#, " ".repeat(MAX_SPEC_BYTES));
    assert!(JobSpec::from_json_checked(padded.as_bytes()).is_ok());
    let escaped =
        format!(r#"{{"name":"a","schedule":"* * * * *","shell":"{}"}}"#, "\\u0001".repeat(MAX_SPEC_BYTES / 5));
    let refused = JobSpec::from_json_checked(escaped.as_bytes()).unwrap_err();
    assert!(matches!(refused.kind(), ErrorKind::Invalid { field } if field == "spec"), "{refused}");
}

#[test]
fn a_specs_h_items_resolve_by_its_name() {
    let spec = |name: &str, schedule: &str| {
        JobSpec::from_json(format!(r#"{{"name":"{name}","schedule":"{schedule}","shell":"true"}}"#).as_bytes())
    };
    // The time crate's pinned slots: `backup` minute 25, hour 1.
    let (schedule, _) = spec("backup", "H H * * *").unwrap().validated_schedule().unwrap();
    assert_eq!(schedule.expr(), "25 1 * * *");
    // A bad `H` is refused naming the schedule, in one line.
    let e = spec("backup", "H(5-1) * * * *").unwrap_err().to_string();
    assert!(e.starts_with("schedule: minute field \"H(5-1)\": range 5-1 is reversed") && !e.contains('\n'), "{e}");
}

#[test]
fn retry_delays_double_up_to_a_day() {
    let retries = super::super::Retries { max: 50, backoff: Duration::from_secs(10) };
    let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
    for (attempt, delay) in [(1, 10), (2, 20), (3, 40), (14, 81_920), (15, 86_400), (50, 86_400)] {
        assert_eq!(retries.delay_after(attempt), Duration::from_secs(delay), "attempt {attempt}");
        assert_eq!(retries.retry_at(attempt, now), now + chrono::TimeDelta::seconds(delay as i64));
    }
}

/// Written specs need a schedule that still fires (as of the instant given); stored
/// ones keep loading whatever their schedule, and one-shots and jobs without a
/// schedule are exempt. Each refusal is one line naming the schedule and why.
#[test]
fn a_schedule_without_a_fire_after_now_is_refused_at_write_but_a_stored_one_still_loads() {
    let now = chrono::DateTime::parse_from_rfc3339("2026-12-06T00:00:00Z").unwrap().to_utc();
    let spec = |schedule: &str| {
        let json = serde_json::json!({ "name": "a", "schedule": schedule, "shell": "true" }).to_string();
        JobSpec::from_json(json.as_bytes()).unwrap()
    };
    for (schedule, refusal) in [
        (
            "0 0 0 29 FEB ? 2100",
            Some(
                r#"schedule "0 0 0 29 FEB ? 2100": never fires (29 February is only in leap years and 2100 is not one)"#,
            ),
        ),
        (
            "0 0 0 1 JAN ? 2020",
            Some(
                r#"schedule "0 0 0 1 JAN ? 2020": has no fire after 2026-12-06T00:00:00Z (the last year it allows is 2020)"#,
            ),
        ),
        ("0 0 0 1 JAN ? 2090", None),
        ("0 0 0 29 FEB ? 2096", None),
        ("0 0 L 2 ?", None),
        ("0 22-22/4 * * *", None),
        // A one-shot whose instant is past is done, not wrong: a jobs file keeps applying.
        ("@at 2020-01-01T00:00:00Z", None),
        ("@every 1h", None),
    ] {
        let spec = spec(schedule);
        match (spec.validate_at(now), refusal) {
            (Ok(()), None) => {}
            (Err(e), Some(message)) => {
                assert_eq!(e.to_string(), message);
                assert!(matches!(e.kind(), ErrorKind::Invalid { field } if field == "schedule"), "{e}");
            }
            (got, want) => panic!("{schedule}: got {got:?}, want {want:?}"),
        }
    }
    // What is stored loads whatever its schedule's future: schedulers keep serving it.
    let stored = br#"{"name":"a","schedule":"0 0 0 29 FEB ? 2100","shell":"true"}"#;
    assert!(JobSpec::from_json(stored).is_ok() && JobSpec::from_json_checked(stored).is_ok());
    // `validate` (the writers' check) refuses it too, on the system clock.
    assert!(JobSpec::from_json(stored).unwrap().validate().is_err());
    // A job that runs only after another has no schedule to fire.
    let chained = br#"{"name":"b","after":[{"job":"a"}],"shell":"true"}"#;
    JobSpec::from_json(chained).unwrap().validate_at(now).unwrap();
    // A jobs file is checked as it would be written.
    let file = "[[job]]\nname = \"leap\"\nschedule = \"0 0 0 29 FEB ? 2100\"\nshell = \"true\"\n";
    let err = crate::spec::parse_jobs_file(file, "jobs.toml").unwrap_err().to_string();
    assert!(err.contains("jobs.toml: job 1 (\"leap\")") && err.contains("never fires"), "{err}");
}

#[test]
fn unknown_field_message_lists_the_field() {
    let err = JobSpec::from_json(br#"{"name":"a","schedule":"* * * * *","shell":"x","colour":1}"#).unwrap_err();
    assert!(err.to_string().contains("unknown field `colour`"), "{err}");
}

mod properties {
    use proptest::prelude::*;

    use super::*;

    const FIELDS: [&str; 24] = [
        "name",
        "schedule",
        "timezone",
        "dst",
        "shell",
        "wasm",
        "timeout",
        "overlap",
        "lock",
        "catchup",
        "catchup_window",
        "starting_deadline",
        "retries",
        "jitter",
        "pool",
        "paused",
        "history",
        "output_lines",
        "description",
        "labels",
        "input_schema",
        "command",
        "argv",
        "colour",
    ];

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(serde_json::Value::from),
            "\\PC{0,24}".prop_map(serde_json::Value::from),
            "[0-9]{1,20}(ms|s|m|h|d|days|years)".prop_map(serde_json::Value::from),
            prop::sample::select(vec!["* * * * *", "@every 1s", "skip", "all", "true", "sha256-00"])
                .prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                proptest::collection::btree_map(prop::sample::select(FIELDS.to_vec()), inner, 0..6).prop_map(|m| {
                    serde_json::Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                }),
            ]
        })
    }

    proptest! {
        /// Whatever an operator puts into KV: parsing never panics, a refusal is one line
        /// naming a field, and what is accepted encodes within the size limit (and
        /// within its bound, which is what settles the limit for most), and is stored
        /// in no more bytes and read back the same.
        #[test]
        fn arbitrary_specs_never_panic_and_refusals_are_one_line(
            fields in proptest::collection::btree_map(prop::sample::select(FIELDS.to_vec()), json_value(), 0..12),
        ) {
            let json = serde_json::Value::Object(fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
            match JobSpec::from_json(json.to_string().as_bytes()) {
                Ok(spec) => {
                    let stored = spec.to_json().unwrap();
                    prop_assert!(stored.len() <= spec.encoded_len() && spec.encoded_len() <= MAX_SPEC_BYTES);
                    prop_assert_eq!(JobSpec::from_json(&stored).ok(), Some(spec.clone()), "stored as {:?}", stored);
                    prop_assert!(spec.encoded_len_bound().is_none_or(|bound| bound >= spec.encoded_len()));
                }
                Err(e) => {
                    prop_assert!(!e.to_string().contains('\n'), "{e}");
                    let invalid = matches!(e.kind(), ErrorKind::Invalid { .. });
                    prop_assert!(invalid, "{e}");
                }
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Err(e) = JobSpec::from_json(&bytes) {
                prop_assert!(!e.to_string().contains('\n'), "{e}");
            }
        }
    }
}

/// (spec JSON fragment, the field a refusal names, or None when accepted): secrets are
/// referenced by valid names in `env`, `config` and webhooks; a reference is nothing but
/// `{ secret = "NAME" }`.
#[test]
fn secret_references_are_checked_naming_the_entry() {
    let plugin = format!("sha256-{}", "0".repeat(64));
    let shell = |env: &str| format!(r#""shell":{{"command":"x","env":{{{env}}}}}"#);
    let wasm = |config: &str| format!(r#""wasm":{{"plugin":"{plugin}","config":{{{config}}}}}"#);
    let notify = |rule: &str| format!(r#""shell":"x","notify":[{{"on":["failed"],{rule}}}]"#);
    let cases = [
        (shell(r#""TOKEN":{"secret":"tok"},"PLAIN":"1""#), None),
        (shell(r#""TOKEN":{"secret":"a.b"}"#), Some("shell.env.TOKEN")),
        (shell(r#""TOKEN":{"secret":""}"#), Some("shell.env.TOKEN")),
        (shell(r#""TOKEN":{"secret":"x","y":1}"#), Some("shell.env.TOKEN")),
        (shell(r#""TOKEN":{"name":"x"}"#), Some("shell.env.TOKEN")),
        (shell(r#""TOKEN":7"#), Some("shell.env.TOKEN")),
        (wasm(r#""token":{"secret":"tok"}"#), None),
        (wasm(r#""token":{"secret":"t>"}"#), Some("wasm.config.token")),
        (notify(r#""webhook":{"secret":"hook"},"headers":{"Authorization":{"secret":"tok"}}"#), None),
        (notify(r#""webhook":{"secret":"a b"}"#), Some("notify[0].webhook")),
        (notify(r#""webhook":"https://h","headers":{"X":{"secret":"*"}}"#), Some("notify[0].headers.X")),
    ];
    for (fragment, refused) in cases {
        let json = format!(r#"{{"name":"a","schedule":"@hourly",{fragment}}}"#);
        match refused {
            None => {
                let spec = JobSpec::from_json(json.as_bytes()).unwrap_or_else(|e| panic!("{fragment}: {e}"));
                assert_eq!(JobSpec::from_json(&spec.to_json().unwrap()).unwrap(), spec, "{fragment}: round trip");
            }
            Some(field) => assert_eq!(field_of(&json), field, "{fragment}"),
        }
    }
}

/// A spec names its secrets by reference only: stored, shown or as TOML it holds the
/// name, and `secret_names` finds every one, a run's (env, config) apart from the rules'.
#[test]
fn a_spec_holds_and_names_its_secrets_by_reference() {
    let toml_text = "[[job]]\nname = \"a\"\nschedule = \"@hourly\"\n\
        shell = { command = \"x\", env = { TOKEN = { secret = \"tok\" }, PLAIN = \"p\" } }\n\
        notify = [{ on = [\"failed\"], webhook = { secret = \"hook\" }, headers = { Authorization = { secret = \"auth\" } } }]\n";
    let spec = crate::spec::parse_jobs_file(toml_text, "jobs.toml").unwrap().remove(0);
    assert_eq!(spec.secret_names().into_iter().collect::<Vec<_>>(), ["auth", "hook", "tok"]);
    assert_eq!(spec.run_secret_names().into_iter().collect::<Vec<_>>(), ["tok"]);
    let stored = String::from_utf8(spec.to_json().unwrap().to_vec()).unwrap();
    assert!(stored.contains(r#""TOKEN":{"secret":"tok"}"#), "{stored}");
    let shown = serde_json::to_string(&spec).unwrap();
    assert!(shown.contains(r#""webhook":{"secret":"hook"}"#), "{shown}");
    let values = crate::spec::secret::SecretValues::from([("tok".to_string(), "v4lue".to_string())]);
    let env = spec.shell.as_ref().unwrap().resolved_env(&values).unwrap();
    assert_eq!((env["TOKEN"].as_str(), env["PLAIN"].as_str()), ("v4lue", "p"));
    let missing = spec.shell.as_ref().unwrap().resolved_env(&Default::default()).unwrap_err();
    assert!(missing.to_string().contains("secret tok does not exist"), "{missing}");
}

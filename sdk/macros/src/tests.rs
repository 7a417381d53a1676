//! Host-side tests of the manifest JSON and of the attribute's expansion and errors.

use crate::expand;
use crate::manifest::{Value, build};
use cronrun_model::spec::JobSpec;
use quote::quote;

fn s(key: &str, v: &str) -> (String, Value) {
    (key.to_string(), Value::Str(v.to_string()))
}

fn int(key: &str, n: u64) -> (String, Value) {
    (key.to_string(), Value::Int(n))
}

fn boolean(key: &str, b: bool) -> (String, Value) {
    (key.to_string(), Value::Bool(b))
}

fn table(key: &str, inner: &[(&str, Value)]) -> (String, Value) {
    (key.to_string(), Value::Table(inner.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()))
}

fn message(attr: proc_macro2::TokenStream) -> String {
    let item = quote! { fn run(ctx: &Context) -> Result<Option<String>, String> { Ok(None) } };
    match expand(attr, item) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

/// What the daemon says at deploy about a Wasm job spec with these extra fields.
fn model_message(fields: &str) -> String {
    let plugin = format!("sha256-{}", "0".repeat(64));
    let schedule = if fields.contains(r#""schedule":"#) { "" } else { r#""schedule":"* * * * *","# };
    let json = format!(r#"{{"name":"hello",{schedule}"wasm":{{"plugin":"{plugin}"}},{fields}}}"#);
    JobSpec::from_json(json.as_bytes()).expect_err(&json).to_string()
}

#[test]
fn manifest_holds_the_keys_given_in_spec_order() {
    let json =
        build(&[s("overlap", "skip"), s("schedule", "0 */5 * * * *"), s("timeout", "30s"), s("timezone", "UTC")])
            .unwrap();
    assert_eq!(json, r#"{"schedule":"0 */5 * * * *","timezone":"UTC","timeout":"30s","overlap":"skip"}"#);
}

#[test]
fn retries_and_backoff_nest_like_the_job_spec() {
    let json = build(&[
        s("schedule", "@every 90s"),
        int("retries", 3),
        s("backoff", "10s"),
        boolean("lock", true),
        s("description", "say \"hi\"\n"),
    ])
    .unwrap();
    assert_eq!(
        json,
        r#"{"schedule":"@every 90s","lock":true,"retries":{"max":3,"backoff":"10s"},"description":"say \"hi\"\n"}"#
    );
    assert_eq!(
        build(&[s("schedule", "@hourly"), int("retries", 2)]).unwrap(),
        r#"{"schedule":"@hourly","retries":{"max":2}}"#
    );
}

#[test]
fn refuses_unknown_keys_naming_the_key_and_the_choices() {
    let e = build(&[s("schedule", "* * * * *"), s("colour", "red")]).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("colour"));
    assert!(e.message.contains("unknown key `colour`"), "{}", e.message);
    assert!(e.message.contains("schedule, timezone, dst, timeout, overlap"), "{}", e.message);
    // What deploy takes from the deployment, not the plugin, is no key of the attribute.
    for key in ["name", "wasm", "shell", "paused", "labels", "history", "output_lines", "notify"] {
        let e = build(&[s("schedule", "* * * * *"), s(key, "x")]).unwrap_err();
        assert!(e.message.contains(&format!("unknown key `{key}`")), "{}", e.message);
    }
}

#[test]
fn refuses_a_missing_schedule_a_repeated_key_and_a_lone_backoff() {
    let e = build(&[s("timezone", "UTC")]).unwrap_err();
    assert!(e.message.contains("needs a schedule"), "{}", e.message);
    assert_eq!(e.key, None);
    let e = build(&[s("schedule", "* * * * *"), s("timeout", "1s"), s("timeout", "2s")]).unwrap_err();
    assert_eq!((e.key.as_deref(), e.message.as_str()), (Some("timeout"), "key `timeout` is given twice"));
    let e = build(&[s("schedule", "* * * * *"), s("backoff", "1s")]).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("backoff"));
    assert!(e.message.contains("needs `retries"), "{}", e.message);
}

#[test]
fn refuses_a_literal_of_the_wrong_kind_in_the_attributes_terms() {
    for (entry, expected) in [
        (s("retries", "3"), "retries takes a number, e.g. retries = 3"),
        (int("timeout", 30), "timeout takes a string, e.g. timeout = \"...\""),
        (int("overlap", 1), "overlap takes a string"),
        (boolean("description", true), "description takes a string"),
        (int("lock", 1), "lock takes true, false or a lock name"),
    ] {
        let e = build(&[s("schedule", "* * * * *"), entry.clone()]).unwrap_err();
        assert!(e.message.contains(expected), "{entry:?}: {}", e.message);
        assert_eq!(e.key.as_deref(), Some(entry.0.as_str()));
    }
}

/// Each bad value is refused with exactly the message `cronrun deploy` gives for it (the
/// same `cronrun_model` validation), pointed at the key it came from.
#[test]
fn refuses_what_deploy_refuses_with_the_models_message() {
    #[rustfmt::skip]
    let cases = [
        // (entries after the schedule, or with it; spec fields for the model; key; part of the message)
        (vec![s("schedule", "61 * * * *")], r#""schedule":"61 * * * *""#, "schedule", "61 is out of range 0-59"),
        (vec![s("schedule", "* * * *")], r#""schedule":"* * * *""#, "schedule", "has 4 fields"),
        (vec![s("schedule", "* * * * $")], r#""schedule":"* * * * $""#, "schedule", "not a valid value"),
        (vec![s("schedule", "@every 500ms")], r#""schedule":"@every 500ms""#, "schedule", "at least 1s"),
        (vec![s("schedule", "@sometimes")], r#""schedule":"@sometimes""#, "schedule", "unknown macro"),
        (vec![s("timezone", "Europe/Berlin time")], r#""timezone":"Europe/Berlin time""#, "timezone", "unknown time zone"),
        (vec![s("timezone", "Mars/Olympus")], r#""timezone":"Mars/Olympus""#, "timezone", "unknown time zone"),
        (vec![s("timeout", "soon")], r#""timeout":"soon""#, "timeout", "invalid duration \"soon\""),
        (vec![s("timeout", "0s")], r#""timeout":"0s""#, "timeout", "must be positive"),
        (vec![s("starting_deadline", "1 fortnight")], r#""starting_deadline":"1 fortnight""#, "starting_deadline", "invalid duration"),
        (vec![s("timeout", "1000000000years")], r#""timeout":"1000000000years""#, "timeout", "over the limit"),
        (vec![s("catchup_window", "5000000years")], r#""catchup_window":"5000000years""#, "catchup_window", "over the limit"),
        (vec![s("jitter", "2days")], r#""jitter":"2days""#, "jitter", "over the limit"),
        (vec![int("retries", 1), s("backoff", "2days")], r#""retries":{"max":1,"backoff":"2days"}"#, "backoff", "over the limit"),
        (vec![int("retries", 101)], r#""retries":{"max":101}"#, "retries", "at most 100"),
        (vec![s("overlap", "sometimes")], r#""overlap":"sometimes""#, "overlap", "unknown variant `sometimes`"),
        (vec![s("dst", "sometimes")], r#""dst":"sometimes""#, "dst", "\"skip\" or \"twice\""),
        (vec![s("catchup", "some")], r#""catchup":"some""#, "catchup", "unknown variant `some`"),
        // Lock and pool names end up in KV keys and NATS subjects: no wildcards, no dots.
        (vec![s("lock", "a.*")], r#""lock":"a.*""#, "lock", "must be 1 to 64 of A-Z a-z 0-9 _ -"),
        (vec![s("lock", "a>")], r#""lock":"a>""#, "lock", "must be 1 to 64 of A-Z a-z 0-9 _ -"),
        (vec![s("pool", "a.*")], r#""pool":"a.*""#, "pool", "must be 1 to 64 of A-Z a-z 0-9 _ -"),
        (vec![s("pool", "a>")], r#""pool":"a>""#, "pool", "must be 1 to 64 of A-Z a-z 0-9 _ -"),
        (vec![s("pool", &"p".repeat(65))], &format!(r#""pool":"{}""#, "p".repeat(65)), "pool", "must be 1 to 64"),
        (vec![s("lock", "")], r#""lock":"""#, "lock", "must not be empty"),
    ];
    for (entries, fields, key, part) in cases {
        let mut all = entries.clone();
        if !all.iter().any(|(k, _)| k == "schedule") {
            all.insert(0, s("schedule", "* * * * *"));
        }
        let e = build(&all).unwrap_err();
        assert_eq!(e.message, model_message(fields), "{entries:?}");
        assert!(e.message.contains(part), "{entries:?}: {}", e.message);
        assert!(!e.message.contains('\n'), "{entries:?}: one line: {}", e.message);
        assert_eq!(e.key.as_deref(), Some(key), "{entries:?}: {}", e.message);
    }
}

#[test]
fn accepts_what_deploy_accepts() {
    for entries in [
        vec![s("schedule", "*/5 * * * *")],
        vec![s("schedule", "0 */5 * * * *")],
        vec![s("schedule", "0 0 12 ? * FRI#3 2030")],
        vec![s("schedule", "0 0 L * *")],
        vec![s("schedule", "@daily")],
        vec![s("schedule", "@every 1s")],
        vec![s("schedule", "@at 2026-12-24T18:00:00Z")],
        vec![s("schedule", "30 2 * * *"), s("timezone", "America/Argentina/Buenos_Aires")],
        vec![s("schedule", "@hourly"), s("timeout", "1h30m"), s("overlap", "replace"), s("catchup", "all")],
        vec![s("schedule", "@hourly"), s("catchup_window", "6h"), s("starting_deadline", "500ms"), s("jitter", "1day")],
        vec![s("schedule", "@hourly"), int("retries", 100), s("backoff", "1day"), s("pool", &"p".repeat(64))],
        vec![s("schedule", "@hourly"), boolean("lock", true), s("pool", "gpu_1-a")],
        vec![s("schedule", "@hourly"), boolean("lock", false), s("description", "any text: a.* > ✓")],
        vec![s("schedule", "@hourly"), s("lock", "db-main_2")],
    ] {
        if let Err(e) = build(&entries) {
            panic!("{entries:?}: {}", e.message);
        }
    }
}

#[test]
fn expansion_exports_run_and_embeds_the_manifest_section() {
    let out = expand(
        quote! { schedule = "0 */5 * * * *", timezone = "UTC" },
        quote! { fn tick(ctx: &Context) -> Result<(), String> { Ok(()) } },
    )
    .unwrap()
    .to_string();
    assert!(out.contains("fn tick"), "{out}");
    assert!(out.contains("link_section = \"cronrun-manifest\""), "{out}");
    assert!(out.contains(r#"b"{\"schedule\":\"0 */5 * * * *\",\"timezone\":\"UTC\"}""#), "{out}");
    assert!(out.contains("__private :: call (ctx , tick)"), "{out}");
    assert!(out.contains("__private :: export !"), "{out}");
}

#[test]
fn attribute_errors_are_clear() {
    assert!(message(quote! { timezone = "UTC" }).contains("needs a schedule"));
    assert!(message(quote! { schedule = "* * * * *", colour = "red" }).contains("unknown key `colour`"));
    assert!(message(quote! { schedule }).contains("write #[job(schedule = "));
    assert!(message(quote! { schedule = some_const }).contains("expected a literal"));
    assert_eq!(message(quote! { schedule = "61 * * * *" }), model_message(r#""schedule":"61 * * * *""#));
    assert_eq!(message(quote! { schedule = "@hourly", pool = "a>" }), model_message(r#""pool":"a>""#));
    let async_fn = expand(
        quote! { schedule = "* * * * *" },
        quote! { async fn run(ctx: &Context) -> Result<(), String> { Ok(()) } },
    );
    assert!(async_fn.unwrap_err().to_string().contains("cannot be async"));
    let no_arg = expand(quote! { schedule = "* * * * *" }, quote! { fn run() -> Result<(), String> { Ok(()) } });
    assert!(no_arg.unwrap_err().to_string().contains("exactly one argument"));
}

/// A refused value is reported at its `key = value`, not at the whole attribute; a bad
/// second `after` at that one, a repeated key at its repetition.
#[test]
fn errors_point_at_the_offending_argument() {
    let item = quote! { fn run(ctx: &Context) -> Result<(), String> { Ok(()) } };
    for (attr, offending) in [
        (r#"schedule = "@hourly", timezone = "UTC", jitter = "2days", pool = "a""#, r#"jitter = "2days""#),
        (r#"after = "a", after(job = "b", on = "sometimes")"#, r#"after(job = "b", on = "sometimes")"#),
        (r#"after = "a", after(job = "b", when = "x")"#, r#"after(job = "b", when = "x")"#),
        (r#"after = "a", after = 3"#, "after = 3"),
        (r#"on = "a.b", timeout = "1s", timeout = "2s""#, r#"timeout = "2s""#),
    ] {
        let e = expand(attr.parse().unwrap(), item.clone()).unwrap_err();
        let (start, end) = (e.span().start().column, e.span().end().column);
        assert_eq!(&attr[start..end], offending, "{e}");
    }
}

#[test]
fn triggers_render_as_the_job_spec_writes_them() {
    let str_ = |v: &str| Value::Str(v.to_string());
    #[rustfmt::skip]
    let cases = [
        (vec![s("on", "orders.created")], r#"{"on":{"subject":"orders.created"}}"#),
        (vec![table("on", &[("subject", str_("orders.*")), ("concurrency", Value::Int(4))]), s("overlap", "allow")],
            r#"{"overlap":"allow","on":{"concurrency":4,"subject":"orders.*"}}"#),
        (vec![s("after", "extract")], r#"{"after":[{"job":"extract"}]}"#),
        (vec![s("after", "extract"), table("after", &[("job", str_("load")), ("on", str_("failed"))]), s("schedule", "@daily")],
            r#"{"schedule":"@daily","after":[{"job":"extract"},{"job":"load","on":"failed"}]}"#),
        (vec![s("schedule", "@hourly"), s("on", "a.b"), s("after", "x")],
            r#"{"schedule":"@hourly","on":{"subject":"a.b"},"after":[{"job":"x"}]}"#),
    ];
    for (entries, expected) in cases {
        assert_eq!(build(&entries).map_err(|e| e.message), Ok(expected.to_string()), "{entries:?}");
    }
}

#[test]
fn refuses_bad_triggers_at_their_key() {
    let str_ = |v: &str| Value::Str(v.to_string());
    #[rustfmt::skip]
    let cases = [
        (table("on", &[("subjet", str_("a"))]), "on", "unknown key `subjet` in on(...)"),
        (table("on", &[("subject", str_("a")), ("subject", str_("b"))]), "on", "given twice in on(...)"),
        (table("on", &[("subject", table("x", &[]).1)]), "on", "takes literals"),
        (int("on", 3), "on", "on takes a subject or a table"),
        (boolean("after", true), "after", "after takes a job name or a table"),
        (table("after", &[("job", str_("x")), ("when", str_("failed"))]), "after", "unknown key `when`"),
        // The spec's own checks, pointed at the key.
        (s("on", "orders.>.x"), "on", "on.subject"),
        (s("on", "$JS.API.>"), "on", "on.subject"),
        (table("on", &[("subject", str_("a")), ("concurrency", Value::Int(0))]), "on", "on.concurrency must be 1 to 1000"),
        (table("on", &[("subject", str_("a")), ("concurrency", Value::Int(2))]), "on", "overlap"),
        (table("on", &[("subject", str_("a")), ("redeliver", Value::Int(1_000_000))]), "on", "on.redeliver must be at most"),
        (table("after", &[("job", str_("x")), ("on", str_("sometimes"))]), "after", "unknown variant `sometimes`"),
        (s("after", "a.*"), "after", "after"),
    ];
    for (entry, key, part) in cases {
        let e = build(std::slice::from_ref(&entry)).unwrap_err();
        assert!(e.message.contains(part), "{entry:?}: {}", e.message);
        assert_eq!(e.key.as_deref(), Some(key), "{entry:?}: {}", e.message);
        assert!(!e.message.contains('\n'), "{entry:?}: one line: {}", e.message);
    }
}

#[test]
fn trigger_attributes_expand_and_a_bare_key_is_refused() {
    let item = quote! { fn run(ctx: &Context) -> Result<(), String> { Ok(()) } };
    let out = expand(quote! { on(subject = "orders.*", redeliver = 5), after = "extract" }, item.clone()).unwrap();
    let out = out.to_string();
    assert!(
        out.contains(r#"b"{\"on\":{\"redeliver\":5,\"subject\":\"orders.*\"},\"after\":[{\"job\":\"extract\"}]}""#),
        "{out}"
    );
    assert!(message(quote! { on }).contains("`on` needs a value"));
    assert!(message(quote! { on(subject = some_const) }).contains("expected a literal"));
}

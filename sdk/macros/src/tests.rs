//! Host-side tests of the manifest JSON and of the attribute's expansion and errors.

use crate::expand;
use crate::manifest::{Value, build};
use quote::quote;

fn s(key: &str, v: &str) -> (String, Value) {
    (key.to_string(), Value::Str(v.to_string()))
}

fn message(attr: proc_macro2::TokenStream) -> String {
    let item = quote! { fn run(ctx: &Context) -> Result<Option<String>, String> { Ok(None) } };
    match expand(attr, item) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
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
        ("retries".to_string(), Value::Int(3)),
        s("backoff", "10s"),
        ("lock".to_string(), Value::Bool(true)),
        s("description", "say \"hi\"\n"),
    ])
    .unwrap();
    assert_eq!(
        json,
        r#"{"schedule":"@every 90s","lock":true,"retries":{"max":3,"backoff":"10s"},"description":"say \"hi\"\n"}"#
    );
}

#[test]
fn refuses_unknown_keys_naming_the_key_and_the_choices() {
    let e = build(&[s("schedule", "* * * * *"), s("colour", "red")]).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("colour"));
    assert!(e.message.contains("unknown key `colour`"), "{}", e.message);
    assert!(e.message.contains("schedule, timezone, timeout, overlap"), "{}", e.message);
}

#[test]
fn refuses_a_missing_schedule() {
    let e = build(&[s("timezone", "UTC")]).unwrap_err();
    assert!(e.message.contains("needs a schedule"), "{}", e.message);
}

#[test]
fn refuses_bad_values_with_the_reason() {
    let cases = [
        (s("overlap", "sometimes"), "expected one of skip, allow, queue, replace"),
        (s("timeout", "soon"), "invalid duration \"soon\""),
        (s("timezone", "Europe/Berlin time"), "not an IANA zone name"),
        (("retries".to_string(), Value::Str("3".into())), "retries takes a number"),
        (("timeout".to_string(), Value::Int(30)), "timeout takes a string"),
        (s("lock", "a lock"), "lock takes true, false or a lock name"),
    ];
    for (entry, expected) in cases {
        let e = build(&[s("schedule", "* * * * *"), entry.clone()]).unwrap_err();
        assert!(e.message.contains(expected), "{entry:?}: {}", e.message);
        assert_eq!(e.key.as_deref(), Some(entry.0.as_str()));
    }
    let e = build(&[s("schedule", "* * * * *"), s("backoff", "1s")]).unwrap_err();
    assert!(e.message.contains("needs `retries"), "{}", e.message);
}

#[test]
fn checks_the_schedule_shape() {
    for good in [
        "*/5 * * * *",
        "0 */5 * * * *",
        "0 0 12 ? * FRI#3 2030",
        "0 0 L * *",
        "@daily",
        "@every 1s",
        "@at 2026-12-24T18:00:00Z",
    ] {
        assert!(build(&[s("schedule", good)]).is_ok(), "{good}");
    }
    for (bad, why) in [
        ("* * * *", "has 4 fields"),
        ("@every 500ms", "at least 1s"),
        ("@sometimes", "unknown @ form"),
        ("* * * * $", "characters a cron field cannot have"),
    ] {
        let e = build(&[s("schedule", bad)]).unwrap_err();
        assert!(e.message.contains(why), "{bad}: {}", e.message);
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
    let async_fn = expand(
        quote! { schedule = "* * * * *" },
        quote! { async fn run(ctx: &Context) -> Result<(), String> { Ok(()) } },
    );
    assert!(async_fn.unwrap_err().to_string().contains("cannot be async"));
    let no_arg = expand(quote! { schedule = "* * * * *" }, quote! { fn run() -> Result<(), String> { Ok(()) } });
    assert!(no_arg.unwrap_err().to_string().contains("exactly one argument"));
}

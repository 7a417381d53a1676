//! A run's input (`cronrun trigger JOB --input JSON`): any JSON, at most `MAX_INPUT_BYTES`
//! as compact text, matched against the job's `input_schema` (a JSON Schema, checked with
//! the `jsonschema` crate; references to other documents are refused, nothing is fetched).
//! It is kept in the run record, so every attempt gets the same, and handed to the job: a
//! shell job's standard input, a guest's `input::get`.

use serde_json::Value;

use crate::error::Error;
use crate::record::MAX_INPUT_BYTES;
use crate::spec::JobSpec;

/// `text` read as the input of a run; `from` names where it came from (`--input`).
pub fn parse(text: &str, from: &str) -> Result<Value, Error> {
    if text.len() > MAX_INPUT_BYTES * 4 {
        return Err(too_big(from, text.len()));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| {
        Error::invalid("input", format!("{from}: not JSON ({e}); quote text as a JSON string, e.g. '\"hello\"'"))
    })?;
    let size = value.to_string().len();
    if size > MAX_INPUT_BYTES {
        return Err(too_big(from, size));
    }
    Ok(value)
}

/// Whether `input` leaves room in a run record of at most `budget` bytes (the server's max
/// payload less headroom): half of it, so that output still fits beside it.
pub fn fits(input: &Value, budget: usize) -> Result<(), Error> {
    let size = input.to_string().len();
    if size > budget / 2 {
        return Err(Error::invalid(
            "input",
            format!(
                "--input: {size} bytes, over half of what this NATS server lets a run record hold ({budget} bytes)"
            ),
        ));
    }
    Ok(())
}

fn too_big(from: &str, size: usize) -> Error {
    Error::invalid(
        "input",
        format!(
            "{from}: {size} bytes, over the {MAX_INPUT_BYTES}-byte limit of an input; pass a path or a URL instead"
        ),
    )
}

/// Whether the job's `input_schema`, if any, is a schema `jsonschema` can check with.
pub fn check_schema(spec: &JobSpec) -> Result<(), Error> {
    match &spec.input_schema {
        Some(schema) => compile(spec, schema).map(drop),
        None => Ok(()),
    }
}

/// Whether `input` (None: none given) is what the job's `input_schema` asks for. A job
/// with a schema needs an input.
pub fn check(spec: &JobSpec, input: Option<&Value>) -> Result<(), Error> {
    let Some(schema) = &spec.input_schema else { return Ok(()) };
    let validator = compile(spec, schema)?;
    let Some(input) = input else {
        return Err(Error::invalid("input", format!("job {} has an input_schema: give --input", spec.name)));
    };
    validator.validate(input).map_err(|e| {
        let at = e.instance_path().to_string();
        let at = if at.is_empty() { String::new() } else { format!(" at {at}") };
        let why = e.to_string().replace('\n', " ");
        Error::invalid("input", format!("the input does not match job {}'s input_schema{at}: {why}", spec.name))
    })
}

fn compile(spec: &JobSpec, schema: &Value) -> Result<jsonschema::Validator, Error> {
    jsonschema::validator_for(schema).map_err(|e| {
        let why = e.to_string().replace('\n', " ");
        Error::invalid(
            "input_schema",
            format!("job {}: input_schema is not a JSON Schema this agent can use: {why}", spec.name),
        )
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::spec::ShellSpec;

    fn job(schema: Option<Value>) -> JobSpec {
        let mut spec = JobSpec::shell("j", "@daily", ShellSpec { command: Some("cat".into()), ..Default::default() });
        spec.input_schema = schema;
        spec
    }

    #[test]
    fn inputs_are_json_within_the_bound() {
        let big = format!("\"{}\"", "x".repeat(MAX_INPUT_BYTES));
        // Measured as stored (compact JSON), not as given: spaces do not count.
        let padded = format!("{{\"a\": {}1}}", " ".repeat(MAX_INPUT_BYTES * 2));
        let cases: [(&str, Result<Value, &str>); 6] = [
            (r#"{"date": "2026-11-01", "n": 3}"#, Ok(json!({"date": "2026-11-01", "n": 3}))),
            (r#""just text""#, Ok(json!("just text"))),
            ("{not json", Err("--input: not JSON")),
            ("hello", Err("quote text as a JSON string")),
            (&big, Err("over the 65536-byte limit")),
            (&padded, Ok(json!({"a": 1}))),
        ];
        for (text, expected) in cases {
            match (parse(text, "--input"), expected) {
                (Ok(value), Ok(want)) => assert_eq!(value, want),
                (Err(e), Err(needle)) => {
                    let e = e.to_string();
                    assert!(e.contains(needle) && !e.contains('\n'), "{e}");
                }
                (got, want) => panic!("{}: {got:?}, expected {want:?}", &text[..text.len().min(40)]),
            }
        }
    }

    #[test]
    fn inputs_are_checked_against_the_schema_in_one_line() {
        let schema = json!({
            "type": "object",
            "required": ["date"],
            "properties": { "date": { "type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$" } },
        });
        let spec = job(Some(schema));
        check(&spec, Some(&json!({"date": "2026-11-01"}))).unwrap();
        for (input, needle) in [
            (Some(json!({})), "\"date\" is a required property"),
            (Some(json!({"date": "yesterday"})), "at /date"),
            (Some(json!([1])), "is not of type \"object\""),
            (None, "has an input_schema: give --input"),
        ] {
            let e = check(&spec, input.as_ref()).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("job j") && !e.contains('\n'), "{input:?}: {e}");
        }
        check(&job(None), None).unwrap();
        fits(&json!("x".repeat(100)), 4096).unwrap();
        assert!(fits(&json!("x".repeat(3000)), 4096).unwrap_err().to_string().contains("4096 bytes"));
        check(&job(None), Some(&json!(1))).unwrap();
        let bad = job(Some(json!({"type": "no-such-type"})));
        let e = check_schema(&bad).unwrap_err().to_string();
        assert!(e.contains("input_schema is not a JSON Schema"), "{e}");
        let remote = job(Some(json!({"$ref": "https://example.com/schema.json"})));
        assert!(check_schema(&remote).is_err(), "a remote reference is not fetched");
    }
}

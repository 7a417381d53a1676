//! A spec's size as JSON, which the limit (`MAX_SPEC_BYTES`) is judged on: counted exactly
//! by encoding it, or settled by a bound that is cheap to count. A scheduler checks every
//! spec it loads, millions at a start, and encoding each was about a twentieth of its CPU;
//! a spec of ordinary size is far under the limit however its strings escape.

use super::secret::Value;
use super::{JobSpec, ShellSpec, WasmSpec};

/// What a spec's encoding holds besides its strings, at most: field names and punctuation
/// (about 40 fields, under 25 bytes each with quotes, colon and comma), six durations as
/// `format_duration` writes them (under 200 bytes each, whatever the duration), numbers,
/// booleans and enums (under 20 bytes each).
const FIXED_MAX: usize = 4096;

/// The longest a string of `len` bytes encodes to with what surrounds it: six bytes a byte
/// (`\u00XX`, a control character), its quotes, and a comma and a colon beside it.
fn string_max(len: usize) -> usize {
    6 * len + 4
}

fn strings_max<'a>(strings: impl IntoIterator<Item = &'a String>) -> usize {
    strings.into_iter().map(|s| string_max(s.len())).sum()
}

/// What a secret reference adds to its name's string: `{"secret":` and `}`.
const SECRET_REFERENCE_MAX: usize = 16;

/// The longest a map of keys to values (a plain string or a secret's name) encodes to.
fn values_max<'a>(entries: impl IntoIterator<Item = (&'a String, &'a Value)>) -> usize {
    let value_max = |value: &Value| match value {
        Value::Plain(text) => string_max(text.len()),
        Value::Secret(name) => string_max(name.len()) + SECRET_REFERENCE_MAX,
    };
    entries.into_iter().map(|(key, value)| string_max(key.len()) + value_max(value)).sum()
}

impl JobSpec {
    /// The size of the spec's JSON with every field written (as `cronrun get` shows it),
    /// counted without building it: what the size limit is judged on. What is stored
    /// (`to_json`) leaves fields at their defaults out, so it is never longer.
    pub fn encoded_len(&self) -> usize {
        struct Count(usize);
        impl std::io::Write for Count {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0 += buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut count = Count(0);
        // As `to_json`: plain structs of strings and numbers encode without fail.
        let _ = serde_json::to_writer(&mut count, self);
        count.0
    }

    /// At least `encoded_len`, counted from the strings' lengths alone. None for a spec
    /// with an input schema, notifications, chains or a message trigger, whose encoding
    /// this does not bound. Every field is named here, so that a field added to the spec
    /// cannot be left out of the bound unseen.
    pub(super) fn encoded_len_bound(&self) -> Option<usize> {
        let JobSpec {
            name,
            schedule,
            timezone,
            dst: _,
            exclude,
            shell,
            wasm,
            timeout: _,
            overlap: _,
            lock,
            catchup: _,
            catchup_window: _,
            starting_deadline: _,
            run_ttl: _,
            retries: _,
            jitter: _,
            pool,
            paused: _,
            history: _,
            output_lines: _,
            notify,
            description,
            labels,
            input_schema,
            after,
            on,
        } = self;
        if input_schema.is_some() || !notify.is_empty() || !after.is_empty() || on.is_some() {
            return None;
        }
        let own = strings_max([name, schedule, timezone, pool, description].into_iter().chain(lock).chain(exclude));
        let labels = strings_max(labels.iter().flat_map(|(k, v)| [k, v]));
        Some(FIXED_MAX + own + labels + shell.as_ref().map_or(0, shell_max) + wasm.as_ref().map_or(0, wasm_max))
    }
}

fn shell_max(shell: &ShellSpec) -> usize {
    let ShellSpec { command, argv, env, cwd, inherit_env: _, user, group } = shell;
    let singles = [command, cwd, user, group].into_iter().flatten();
    strings_max(singles.chain(argv.iter().flatten())) + values_max(env)
}

fn wasm_max(wasm: &WasmSpec) -> usize {
    let WasmSpec { plugin, config, allow_publish, allow_http, allow_kv: _, signature, signed_at } = wasm;
    let singles = std::iter::once(plugin).chain(signature).chain(signed_at);
    strings_max(singles.chain(allow_publish).chain(allow_http)) + values_max(config)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;

    /// Specs whose every string escapes at its longest (a control character is six bytes
    /// as JSON), and specs whose durations and numbers are the longest: the bound is never
    /// under the size as encoded. An ordinary spec's bound is under the limit, so it is
    /// settled without encoding it.
    #[test]
    fn the_bound_is_never_under_the_encoded_size() {
        let longest_non_strings = |mut spec: JobSpec| {
            let long = Some(Duration::MAX);
            (spec.timeout, spec.starting_deadline, spec.run_ttl) = (long, long, long);
            (spec.jitter, spec.catchup_window, spec.retries.backoff) = (Duration::MAX, Duration::MAX, Duration::MAX);
            (spec.retries.max, spec.history.succeeded, spec.history.failed) = (u32::MAX, u32::MAX, u32::MAX);
            spec.output_lines = u32::MAX;
            spec
        };
        let escaping = |n: usize| {
            let worst = |k: usize| "\u{1}".repeat(k * n);
            let mut shell =
                JobSpec::shell(&worst(1), &worst(2), ShellSpec { command: Some(worst(50)), ..Default::default() });
            (shell.timezone, shell.description, shell.pool, shell.lock) =
                (worst(3), worst(10), worst(3), Some(worst(4)));
            shell.labels = BTreeMap::from([(worst(2), worst(30)), (String::new(), String::new())]);
            let mut argv = shell.clone();
            argv.shell = Some(ShellSpec {
                argv: Some(vec![worst(7), String::new(), worst(1)]),
                env: BTreeMap::from([(worst(3), worst(9).into()), (worst(2), Value::Secret(worst(4)))]),
                cwd: Some(worst(2)),
                inherit_env: true,
                user: Some(worst(1)),
                group: Some(worst(1)),
                ..Default::default()
            });
            let mut wasm = shell.clone();
            wasm.shell = None;
            wasm.wasm = Some(WasmSpec {
                plugin: worst(5),
                config: BTreeMap::from([(worst(1), worst(20).into()), (worst(3), Value::Secret(worst(2)))]),
                allow_publish: vec![worst(3); 4],
                allow_http: vec![String::new(); 3],
                allow_kv: true,
                signature: Some(worst(2)),
                signed_at: Some(worst(1)),
            });
            [shell, argv, wasm]
        };
        let plain = JobSpec::shell("b", "0 3 * * *", ShellSpec { command: Some("true".into()), ..Default::default() });
        let mut specs = vec![plain.clone(), longest_non_strings(plain.clone())];
        specs.extend(escaping(1).into_iter().map(longest_non_strings));
        specs.extend(escaping(100));
        for spec in specs {
            let bound = spec.encoded_len_bound().expect("a spec without schema, notify, after or on is bounded");
            assert!(bound >= spec.encoded_len(), "bound {bound} under {}", spec.encoded_len());
        }
        assert!(plain.encoded_len_bound().is_some_and(|bound| bound <= super::super::validate::MAX_SPEC_BYTES));
        let mut schema =
            JobSpec::shell("c", "* * * * *", ShellSpec { command: Some("x".into()), ..Default::default() });
        schema.input_schema = Some(serde_json::json!({ "type": "object" }));
        assert_eq!(schema.encoded_len_bound(), None, "an input schema is counted exactly");
    }
}

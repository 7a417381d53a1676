//! Cronken's job definitions to job specs, without I/O. The file is a JSON object of job
//! name to definition, as Cronken keeps them in its `{cronken}:jobs` hash (a definition may
//! be the JSON text itself, as `HGETALL` returns it).
//!
//! Cronken schedules with APScheduler 3, whose reading differs from cron's; the import keeps
//! what Cronken did, and says so where it differs:
//!
//! - `cron_args.cronstring` is five fields read by `CronTrigger.from_crontab`, where a
//!   numeric day of week counts from Monday (`1-5` is Tuesday to Saturday): numbers
//!   become day names (`tue-sat`), with a note. Its shorthands `@weekly` (Monday
//!   midnight there), `@minutely` and the others become their expressions; `@never` has no
//!   equivalent and is left out.
//! - Keyword fields (`second` ... `month`, `day_of_week`) become a six-field expression:
//!   fields below the finest one given default to their minimum, those above to `*`, as
//!   in APScheduler. `year`, `week`, `start_date` and `end_date` have no equivalent: the
//!   job is left out with the reason.
//! - APScheduler runs a day-of-month *and* day-of-week restriction only on days matching
//!   both, cron on days matching either: a job restricting both is left out.
//! - `timezone` and `jitter` (seconds) carry over; without `timezone`, the host's zone.
//! - `job_args.cmd` runs as `/bin/bash -c CMD`, as Cronken runs it. `lock = true` is the
//!   default `overlap = "skip"`; a lock name becomes a shared `lock`; `lock = false` ran the
//!   job on every Cronken server, cronrun runs it once per fire (`overlap = "allow"`).
//!   `ttl` is not needed: a run's lease (`run_ttl`) does what the lock's TTL did.
//! - `job_state.paused` becomes `paused`.

use std::time::Duration;

use serde_json::{Map, Value};

use super::{ImportError, Imported, job_name};
use crate::spec::{JobSpec, Overlap, ShellSpec};

pub struct Options {
    pub prefix: Option<String>,
    /// The zone of jobs without `cron_args.timezone` (APScheduler's: the host's).
    pub timezone: String,
}

/// Cronken's shorthands, as `from_crontab` reads the expressions it gives them.
const SHORTHANDS: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * mon"),
    ("@daily", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
    ("@minutely", "* * * * *"),
];

/// APScheduler's fields from the coarsest; `year` and `week` have no cron equivalent.
const KEYWORD_FIELDS: [&str; 8] = ["year", "month", "day", "week", "day_of_week", "hour", "minute", "second"];
const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// Valid Cronken that cronrun cannot run as Cronken did: why, for the list of entries
/// not imported.
struct Unmappable(String);

pub fn parse(text: &str, origin: &str, options: &Options) -> Result<Imported, ImportError> {
    let all: Map<String, Value> =
        serde_json::from_str(text).map_err(|e| ImportError::at(origin)(ImportError::NotDefinitions(e)))?;
    let mut out = Imported::default();
    let mut names = std::collections::BTreeMap::new();
    for (name, definition) in &all {
        let place = format!("job {}", super::shown(name));
        let at = ImportError::at(format!("{origin}: {place}"));
        let definition = match definition {
            Value::String(text) => serde_json::from_str(text).map_err(|e| at(ImportError::NotJson(e)))?,
            other => other.clone(),
        };
        let job = match job(name, &definition, options, &mut out.notes).map_err(&at)? {
            Ok(job) => job,
            Err(Unmappable(why)) => {
                out.skipped.push((place, why));
                continue;
            }
        };
        if let Some(first) = names.insert(job.name.clone(), name.clone()) {
            let why = format!("{first:?} and {name:?} both become job {}: use --prefix or rename one", job.name);
            return Err(at(why.into()));
        }
        out.jobs.push((place, job));
    }
    Ok(out)
}

/// Ok(Err(why)) when the definition is valid Cronken that cronrun cannot run as Cronken did.
fn job(
    name: &str,
    definition: &Value,
    options: &Options,
    notes: &mut Vec<String>,
) -> Result<Result<JobSpec, Unmappable>, ImportError> {
    let cron = definition.get("cron_args").and_then(Value::as_object).ok_or("no cron_args object")?;
    let args = definition.get("job_args").and_then(Value::as_object).ok_or("no job_args object")?;
    let command = args.get("cmd").and_then(Value::as_str).filter(|c| !c.is_empty()).ok_or("job_args.cmd is empty")?;
    let mut note = |text: String| notes.push(format!("job {}: {text}", super::shown(name)));
    let schedule = match cron.get("cronstring").and_then(Value::as_str) {
        Some("@never") => {
            return Ok(Err(Unmappable("@never (run only when triggered) has no equivalent: add it paused".into())));
        }
        Some(text) => match cronstring(text, &mut note)? {
            Ok(schedule) => schedule,
            Err(why) => return Ok(Err(why)),
        },
        None => match keywords(cron)? {
            Ok(schedule) => schedule,
            Err(why) => return Ok(Err(why)),
        },
    };
    let shell = ShellSpec { argv: Some(vec!["/bin/bash".into(), "-c".into(), command.into()]), ..Default::default() };
    let mut spec = JobSpec::shell(&job_name(options.prefix.as_deref(), name), &schedule, shell);
    spec.description = format!("imported from Cronken job {name}");
    spec.timezone = cron.get("timezone").and_then(Value::as_str).unwrap_or(&options.timezone).to_string();
    if let Some(jitter) = cron.get("jitter").filter(|j| !j.is_null()) {
        spec.jitter = Duration::from_secs(jitter.as_u64().ok_or("cron_args.jitter is not a number of seconds")?);
    }
    match args.get("lock") {
        Some(Value::Bool(true)) => spec.overlap = Overlap::Skip,
        Some(Value::Bool(false)) => {
            spec.overlap = Overlap::Allow;
            note("lock = false ran it on every Cronken server; cronrun runs each fire once".into());
        }
        Some(Value::String(lock)) => spec.lock = Some(job_name(None, lock)),
        _ => return Err("job_args.lock is neither true, false nor a lock name".into()),
    }
    spec.paused = definition.pointer("/job_state/paused").and_then(Value::as_bool).unwrap_or(false);
    spec.validate()?;
    Ok(Ok(spec))
}

/// A `from_crontab` expression (five fields, or a Cronken shorthand) in cron's reading.
fn cronstring(text: &str, note: &mut impl FnMut(String)) -> Result<Result<String, Unmappable>, ImportError> {
    if let Some((_, expr)) = SHORTHANDS.iter().find(|(short, _)| *short == text) {
        return Ok(Ok(expr.to_string()));
    }
    let fields: Vec<&str> = text.split_whitespace().collect();
    let [minute, hour, day, month, weekday] = fields.as_slice() else {
        return Err(format!("cronstring {text:?} is not five fields").into());
    };
    if restricted(day) && restricted(weekday) {
        return Ok(Err(Unmappable(both_days_restricted())));
    }
    let days = day_names(weekday)?;
    if days != *weekday {
        note(format!("day of week {weekday:?} counts from Monday in Cronken (APScheduler): written {days:?}"));
    }
    Ok(Ok(format!("{minute} {hour} {day} {month} {days}")))
}

/// APScheduler's keyword fields as six cron fields (second first).
fn keywords(cron: &Map<String, Value>) -> Result<Result<String, Unmappable>, ImportError> {
    let field = |name: &str| -> Result<Option<String>, ImportError> {
        match cron.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(_) => Err(format!("cron_args.{name} is neither text nor a number").into()),
        }
    };
    for unsupported in ["year", "week", "start_date", "end_date"] {
        if field(unsupported)?.is_some_and(|v| v != "*") {
            return Ok(Err(Unmappable(format!("cron_args.{unsupported} has no equivalent in a cron schedule"))));
        }
    }
    let finest = KEYWORD_FIELDS.iter().rposition(|name| field(name).ok().flatten().is_some());
    let Some(finest) = finest else {
        return Err("cron_args has neither cronstring nor a time field".into());
    };
    let value = |name: &str, minimum: &str| -> Result<String, ImportError> {
        let index = KEYWORD_FIELDS.iter().position(|f| *f == name).unwrap_or(0);
        let default = if index > finest && name != "day_of_week" { minimum } else { "*" };
        Ok(field(name)?.unwrap_or_else(|| default.to_string()))
    };
    let (day, weekday) = (value("day", "1")?, value("day_of_week", "*")?);
    if restricted(&day) && restricted(&weekday) {
        return Ok(Err(Unmappable(both_days_restricted())));
    }
    Ok(Ok(format!(
        "{} {} {} {day} {} {}",
        value("second", "0")?,
        value("minute", "0")?,
        value("hour", "0")?,
        value("month", "1")?,
        day_names(&weekday)?
    )))
}

fn restricted(field: &str) -> bool {
    field != "*" && field != "?"
}

fn both_days_restricted() -> String {
    "it restricts both day of month and day of week, which Cronken (APScheduler) requires together and \
     cron takes either of: split it into two jobs"
        .into()
}

/// An APScheduler day-of-week field (numbers from 0 = Monday, names, ranges, steps) as a
/// list of day names, which cron reads the same; `*` stays.
fn day_names(field: &str) -> Result<String, ImportError> {
    if !restricted(field) {
        return Ok(field.to_string());
    }
    let day = |token: &str| -> Result<usize, ImportError> {
        let token = token.trim().to_ascii_lowercase();
        token
            .parse::<usize>()
            .ok()
            .filter(|n| *n < 7)
            .or_else(|| DAYS.iter().position(|d| *d == token))
            .ok_or_else(|| format!("day of week {token:?} is neither 0-6 (from Monday) nor a day name").into())
    };
    let mut days = [false; 7];
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                (range, step.parse::<usize>().ok().filter(|s| *s > 0).ok_or_else(|| format!("step {step:?}"))?)
            }
            None => (item, 1),
        };
        let (first, last) = match range.split_once('-') {
            _ if range == "*" => (0, 6),
            Some((a, b)) => (day(a)?, day(b)?),
            None if step > 1 => (day(range)?, 6),
            None => (day(range)?, day(range)?),
        };
        if first > last {
            return Err(format!("day of week range {range:?} runs backwards").into());
        }
        for d in (first..=last).step_by(step) {
            days[d] = true;
        }
    }
    let names: Vec<&str> = (0..7).filter(|d| days[*d]).map(|d| DAYS[d]).collect();
    Ok(names.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Options {
        Options { prefix: None, timezone: "UTC".into() }
    }

    fn imported(text: &str) -> Imported {
        parse(text, "jobs.json", &options()).unwrap()
    }

    /// Each schedule as Cronken (APScheduler 3) fires it, in cron's words.
    #[test]
    fn schedules_mean_what_they_meant_in_cronken() {
        let cases = [
            (r#"{"cronstring": "0 9 * * 1-5"}"#, "0 9 * * tue,wed,thu,fri,sat"),
            (r#"{"cronstring": "*/15 * * * mon-fri"}"#, "*/15 * * * mon,tue,wed,thu,fri"),
            (r#"{"cronstring": "@weekly"}"#, "0 0 * * mon"),
            (r#"{"cronstring": "@minutely"}"#, "* * * * *"),
            (r#"{"cronstring": "30 2 1 * *"}"#, "30 2 1 * *"),
            (r#"{"second": "*/2"}"#, "*/2 * * * * *"),
            (r#"{"hour": 3}"#, "0 0 3 * * *"),
            (r#"{"day_of_week": "0,2", "hour": "8"}"#, "0 0 8 * * mon,wed"),
            (r#"{"day_of_week": "*/2"}"#, "0 0 0 * * mon,wed,fri,sun"),
            (r#"{"month": "6", "minute": "5"}"#, "0 5 * * 6 *"),
        ];
        for (cron_args, expected) in cases {
            let text = format!(
                r#"{{"j": {{"cron_args": {cron_args}, "job_args": {{"cmd": "true", "lock": true, "ttl": 10}}}}}}"#
            );
            let got = imported(&text);
            assert_eq!(got.jobs.first().map(|(_, j)| j.schedule.as_str()), Some(expected), "{cron_args}: {got:?}");
        }
    }

    #[test]
    fn a_definition_carries_command_lock_state_zone_and_jitter() {
        let text = r#"{
          "nightly": {"cron_args": {"cronstring": "0 3 * * *", "timezone": "Europe/Berlin", "jitter": 30},
                      "job_args": {"cmd": "echo hi && exit 1", "lock": "db", "ttl": 60},
                      "job_state": {"paused": true}},
          "every server": "{\"cron_args\": {\"minute\": \"*/5\"}, \"job_args\": {\"cmd\": \"uptime\", \"lock\": false, \"ttl\": 10}}"
        }"#;
        let got = imported(text);
        let [(_, every), (_, nightly)] = got.jobs.as_slice() else { panic!("{got:?}") };
        assert_eq!(nightly.name, "nightly");
        assert_eq!(nightly.shell.clone().unwrap().argv.unwrap(), ["/bin/bash", "-c", "echo hi && exit 1"]);
        assert_eq!((nightly.timezone.as_str(), nightly.jitter), ("Europe/Berlin", Duration::from_secs(30)));
        assert_eq!((nightly.lock.as_deref(), nightly.paused, nightly.overlap), (Some("db"), true, Overlap::Skip));
        assert_eq!((every.name.as_str(), every.overlap, every.paused), ("every-server", Overlap::Allow, false));
        assert_eq!(every.schedule, "0 */5 * * * *");
        assert!(got.notes.iter().any(|n| n.contains("every Cronken server")), "{:?}", got.notes);
    }

    #[test]
    fn what_cron_cannot_say_is_left_out_with_the_reason() {
        let job =
            |cron: &str| format!(r#"{{"cron_args": {cron}, "job_args": {{"cmd": "x", "lock": true, "ttl": 1}}}}"#);
        let text = format!(
            r#"{{"a": {}, "b": {}, "c": {}, "d": {}}}"#,
            job(r#"{"cronstring": "@never"}"#),
            job(r#"{"year": "2027", "hour": "1"}"#),
            job(r#"{"cronstring": "0 0 13 * 4"}"#),
            job(r#"{"hour": "1", "end_date": "2027-01-01"}"#),
        );
        let got = imported(&text);
        assert!(got.jobs.is_empty(), "{got:?}");
        let why: Vec<&str> = got.skipped.iter().map(|(_, why)| why.as_str()).collect();
        for (i, said) in
            ["@never", "cron_args.year", "both day of month and day of week", "cron_args.end_date"].iter().enumerate()
        {
            assert!(why[i].contains(said), "{said:?} not in {why:?}");
        }
    }

    #[test]
    fn bad_definitions_are_errors_naming_the_job() {
        let cases = [
            (r#"[1, 2]"#, "jobs.json: not a JSON object"),
            (r#"{"a": {"job_args": {"cmd": "x", "lock": true}}}"#, "job a: no cron_args"),
            (
                r#"{"a": {"cron_args": {"hour": "1"}, "job_args": {"cmd": "", "lock": true}}}"#,
                "job a: job_args.cmd is empty",
            ),
            (
                r#"{"a": {"cron_args": {}, "job_args": {"cmd": "x", "lock": true}}}"#,
                "neither cronstring nor a time field",
            ),
            (
                r#"{"a": {"cron_args": {"day_of_week": "8"}, "job_args": {"cmd": "x", "lock": true}}}"#,
                "day of week \"8\"",
            ),
            (
                r#"{"a": {"cron_args": {"cronstring": "1 2 3"}, "job_args": {"cmd": "x", "lock": true}}}"#,
                "not five fields",
            ),
            (r#"{"a": {"cron_args": {"hour": "99"}, "job_args": {"cmd": "x", "lock": true}}}"#, "job a: schedule"),
            (r#"{"a": {"cron_args": {"hour": "1"}, "job_args": {"cmd": "x", "lock": 3}}}"#, "job_args.lock"),
            (r#"{"a": "{not json"}"#, "job a: not JSON"),
            (
                r#"{"a.b": {"cron_args": {"hour": "1"}, "job_args": {"cmd": "x", "lock": true}}, "a-b": {"cron_args": {"hour": "1"}, "job_args": {"cmd": "x", "lock": true}}}"#,
                "both become job a-b",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(text, "jobs.json", &options()).unwrap_err().to_string();
            assert!(err.contains(expected) && !err.contains('\n'), "{text}: {err}");
        }
    }
}

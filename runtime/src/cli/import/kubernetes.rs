//! Kubernetes CronJobs (batch/v1) to job specs, without I/O. A file holds one or more YAML
//! documents, each a CronJob or a `List` of them; other kinds are left out with a reason.
//!
//! | CronJob | job spec |
//! |---|---|
//! | `metadata.name` | `name` (`.` becomes `-`) |
//! | `spec.schedule` (5 fields, macros, `CRON_TZ=` prefix) | `schedule` (and `timezone`) |
//! | `spec.timeZone` | `timezone`; without it UTC, the zone of most control planes (`--tz`) |
//! | `spec.concurrencyPolicy` Allow (default), Forbid, Replace | `overlap` allow, skip, replace |
//! | `spec.startingDeadlineSeconds` | `starting_deadline` |
//! | `spec.suspend` | `paused` |
//! | `spec.successfulJobsHistoryLimit`, `failedJobsHistoryLimit` | `history` |
//! | `jobTemplate.spec.backoffLimit` (default 6) | `retries.max`, first delay 10 s as Kubernetes |
//! | `jobTemplate.spec.activeDeadlineSeconds` | `timeout` |
//! | the one container's `command` + `args` | `shell.argv` (exec form, as Kubernetes) |
//! | its `env` values, `workingDir` | `shell.env`, `shell.cwd` |
//!
//! A container without `command` runs its image's entrypoint, which cronrun cannot: such a
//! CronJob is left out, as is one with several containers. The image, resources, volumes,
//! and env from Secrets or ConfigMaps are not carried over: each is named in a note,
//! because the command then runs on the runner's host, not in the image.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{ImportError, Imported, job_name};
use crate::spec::{JobSpec, Overlap, Retries, ShellSpec};

pub struct Options {
    pub prefix: Option<String>,
    /// The zone of CronJobs without `timeZone` [default: UTC].
    pub timezone: Option<String>,
}

/// What Kubernetes retries a failed Job with when `backoffLimit` is not set.
const DEFAULT_BACKOFF_LIMIT: u32 = 6;
/// Kubernetes' first retry delay (it doubles from there, up to 6 min).
const FIRST_RETRY_DELAY: Duration = Duration::from_secs(10);

pub fn parse(text: &str, origin: &str, options: &Options) -> Result<Imported, ImportError> {
    let mut out = Imported::default();
    for (i, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let at = ImportError::at(format!("{origin}: document {}", i + 1));
        let value = Value::deserialize(document).map_err(|e| at(ImportError::NotYaml(e)))?;
        let objects = match (value.get("kind").and_then(Value::as_str), value.get("items")) {
            (_, _) if value.is_null() => Vec::new(),
            (Some("List"), Some(Value::Array(items))) => items.clone(),
            _ => vec![value],
        };
        for object in &objects {
            cron_job(object, options, &mut out).map_err(&at)?;
        }
    }
    let mut names: Vec<&str> = out.jobs.iter().map(|(_, spec)| spec.name.as_str()).collect();
    names.sort_unstable();
    if let Some(twice) = names.windows(2).find(|pair| pair[0] == pair[1]) {
        let why = format!("{origin}: two CronJobs become job {}: import them with different --prefix", twice[0]);
        return Err(why.into());
    }
    if options.timezone.is_none() && out.jobs.iter().any(|(_, spec)| spec.timezone == "UTC") {
        out.notes.push("CronJobs without timeZone are read as UTC, the zone of most control planes (pass --tz)".into());
    }
    Ok(out)
}

/// One object: a CronJob becomes a job, anything else a reason it did not.
fn cron_job(object: &Value, options: &Options, out: &mut Imported) -> Result<(), ImportError> {
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("(no kind)");
    let name = object.pointer("/metadata/name").and_then(Value::as_str).ok_or("an object without metadata.name")?;
    let place = format!("{} {}", super::shown(kind), super::shown(name));
    if kind != "CronJob" {
        out.skipped.push((place, "not a CronJob".into()));
        return Ok(());
    }
    let at = ImportError::at(place.clone());
    let spec = object.get("spec").and_then(Value::as_object).ok_or_else(|| at("no spec".into()))?;
    let mut notes = Notes { place: place.clone(), notes: &mut out.notes };
    notes.unmapped(
        "spec",
        spec,
        &[
            "schedule",
            "timeZone",
            "concurrencyPolicy",
            "startingDeadlineSeconds",
            "suspend",
            "successfulJobsHistoryLimit",
            "failedJobsHistoryLimit",
            "jobTemplate",
        ],
    );
    let job = spec.get("jobTemplate").and_then(|t| t.get("spec")).and_then(Value::as_object);
    let job = job.ok_or_else(|| at("no spec.jobTemplate.spec".into()))?;
    notes.unmapped("spec.jobTemplate.spec", job, &["backoffLimit", "activeDeadlineSeconds", "template"]);
    let pod = job.get("template").and_then(|t| t.get("spec")).and_then(Value::as_object);
    let pod = pod.ok_or_else(|| at("no spec.jobTemplate.spec.template.spec".into()))?;
    notes.unmapped("the pod spec", pod, &["containers", "restartPolicy"]);
    let containers = pod.get("containers").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let [container] = containers else {
        let why = format!("{} containers: cronrun runs one command per job", containers.len());
        out.skipped.push((place, why));
        return Ok(());
    };
    let container = container.as_object().ok_or_else(|| at("a container that is not a mapping".into()))?;
    let Some(shell) = shell(container, &mut notes).map_err(&at)? else {
        let why = "its container has no command (it runs its image's entrypoint): cronrun runs commands on the \
                   host, give one in the spec";
        out.skipped.push((place, why.into()));
        return Ok(());
    };

    let (timezone, schedule) = schedule(spec, options).map_err(&at)?;
    let mut job_spec = JobSpec::shell(&job_name(options.prefix.as_deref(), &name.replace('.', "-")), &schedule, shell);
    job_spec.timezone = timezone;
    job_spec.description = format!("imported from CronJob {name}");
    job_spec.overlap = match spec.get("concurrencyPolicy").and_then(Value::as_str).unwrap_or("Allow") {
        "Allow" => Overlap::Allow,
        "Forbid" => Overlap::Skip,
        "Replace" => Overlap::Replace,
        other => return Err(at(format!("concurrencyPolicy {other:?} is none of Allow, Forbid, Replace").into())),
    };
    job_spec.starting_deadline = seconds(spec, "startingDeadlineSeconds").map_err(&at)?;
    job_spec.paused = spec.get("suspend").and_then(Value::as_bool).unwrap_or(false);
    for (field, kept) in [
        ("successfulJobsHistoryLimit", &mut job_spec.history.succeeded),
        ("failedJobsHistoryLimit", &mut job_spec.history.failed),
    ] {
        if let Some(n) = count(spec, field).map_err(&at)? {
            *kept = n;
        }
    }
    let retries = count(job, "backoffLimit").map_err(&at)?.unwrap_or(DEFAULT_BACKOFF_LIMIT);
    job_spec.retries = Retries { max: retries, backoff: FIRST_RETRY_DELAY };
    job_spec.timeout = seconds(job, "activeDeadlineSeconds").map_err(&at)?;
    job_spec.validate().map_err(|e| at(e.into()))?;
    out.jobs.push((place, job_spec));
    Ok(())
}

/// The schedule and its zone: `spec.timeZone`, a `CRON_TZ=`/`TZ=` prefix, or the default.
fn schedule(spec: &Map<String, Value>, options: &Options) -> Result<(String, String), ImportError> {
    let schedule = spec.get("schedule").and_then(Value::as_str).ok_or("no spec.schedule")?.trim();
    let (prefixed, schedule) = match schedule.split_once(' ') {
        Some((zone, rest)) if zone.starts_with("CRON_TZ=") || zone.starts_with("TZ=") => {
            (zone.split_once('=').map(|(_, tz)| tz.to_string()), rest.trim())
        }
        _ => (None, schedule),
    };
    let zone = spec.get("timeZone").and_then(Value::as_str).map(String::from);
    let timezone = zone.or(prefixed).or_else(|| options.timezone.clone()).unwrap_or_else(|| "UTC".into());
    Ok((timezone, schedule.to_string()))
}

/// The container's command and arguments as an argv, its env values and working dir;
/// None when it gives no command.
fn shell(container: &Map<String, Value>, notes: &mut Notes) -> Result<Option<ShellSpec>, ImportError> {
    notes.unmapped("the container", container, &["name", "image", "command", "args", "env", "workingDir"]);
    if let Some(image) = container.get("image").and_then(Value::as_str) {
        notes.push(format!("the command runs on the runner's host, not in image {image}"));
    }
    let strings = |field: &str| -> Result<Vec<String>, ImportError> {
        match container.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| item.as_str().map(String::from).ok_or_else(|| format!("{field} holds a non-string").into()))
                .collect(),
            Some(_) => Err(format!("{field} is not a list").into()),
        }
    };
    let command = strings("command")?;
    if command.is_empty() {
        return Ok(None);
    }
    let mut shell = ShellSpec { argv: Some([command, strings("args")?].concat()), ..Default::default() };
    shell.cwd = container.get("workingDir").and_then(Value::as_str).map(String::from);
    for variable in container.get("env").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
        let name = variable.get("name").and_then(Value::as_str).ok_or("an env entry without a name")?;
        match variable.get("value").and_then(Value::as_str) {
            Some(value) => {
                shell.env.insert(name.into(), value.into());
            }
            None => notes.push(format!("env {name} comes from elsewhere (valueFrom): not imported, set it in the job")),
        }
    }
    Ok(Some(shell))
}

fn count(object: &Map<String, Value>, field: &str) -> Result<Option<u32>, ImportError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| format!("{field} is not a count").into()),
    }
}

fn seconds(object: &Map<String, Value>, field: &str) -> Result<Option<Duration>, ImportError> {
    Ok(count(object, field)?.map(|n| Duration::from_secs(n.into())))
}

/// Notes about one CronJob: what was not carried over.
struct Notes<'a> {
    place: String,
    notes: &'a mut Vec<String>,
}

impl Notes<'_> {
    fn push(&mut self, note: String) {
        self.notes.push(format!("{}: {note}", self.place));
    }

    /// A note naming the fields of `object` outside `known`.
    fn unmapped(&mut self, what: &str, object: &Map<String, Value>, known: &[&str]) {
        let left: Vec<&str> = object.keys().map(String::as_str).filter(|k| !known.contains(k)).collect();
        if !left.is_empty() {
            self.push(format!("not carried over from {what}: {}", left.join(", ")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BACKUP: &str = r#"
apiVersion: batch/v1
kind: CronJob
metadata:
  name: db.backup
  namespace: prod
spec:
  schedule: "30 2 * * *"
  timeZone: Europe/Berlin
  concurrencyPolicy: Forbid
  startingDeadlineSeconds: 300
  successfulJobsHistoryLimit: 5
  jobTemplate:
    spec:
      backoffLimit: 2
      activeDeadlineSeconds: 3600
      template:
        spec:
          restartPolicy: OnFailure
          containers:
            - name: backup
              image: postgres:16
              command: ["pg_dump", "-f", "/backup/db.sql"]
              args: ["--verbose"]
              workingDir: /srv
              resources: { limits: { memory: 1Gi } }
              env:
                - { name: PGHOST, value: db }
                - name: PGPASSWORD
                  valueFrom: { secretKeyRef: { name: db, key: password } }
"#;

    fn options() -> Options {
        Options { prefix: None, timezone: None }
    }

    #[test]
    fn a_cron_job_becomes_a_job_with_each_field_mapped() {
        let got = parse(BACKUP, "backup.yaml", &options()).unwrap();
        let [(place, job)] = got.jobs.as_slice() else { panic!("{got:?}") };
        assert_eq!(place, "CronJob db.backup");
        assert_eq!(
            (job.name.as_str(), job.schedule.as_str(), job.timezone.as_str()),
            ("db-backup", "30 2 * * *", "Europe/Berlin")
        );
        assert_eq!(job.overlap, Overlap::Skip);
        assert_eq!(job.starting_deadline, Some(Duration::from_secs(300)));
        assert_eq!((job.history.succeeded, job.retries.max, job.timeout), (5, 2, Some(Duration::from_secs(3600))));
        let shell = job.shell.clone().unwrap();
        assert_eq!(shell.argv.unwrap(), ["pg_dump", "-f", "/backup/db.sql", "--verbose"]);
        assert_eq!((shell.cwd.as_deref(), shell.env.get("PGHOST").and_then(|v| v.plain())), (Some("/srv"), Some("db")));
        assert!(!shell.env.contains_key("PGPASSWORD"));
        let notes = got.notes.join("\n");
        for said in ["not in image postgres:16", "the container: resources", "env PGPASSWORD comes from elsewhere"] {
            assert!(notes.contains(said), "{said:?} not in {notes}");
        }
    }

    /// Kubernetes' defaults where the CronJob is silent: Allow, 6 retries, the zone of
    /// the control plane (UTC unless --tz), the prefix in the name.
    #[test]
    fn defaults_are_kubernetes_own_and_a_list_holds_several() {
        let list = r#"
apiVersion: v1
kind: List
items:
  - apiVersion: batch/v1
    kind: CronJob
    metadata: { name: tick }
    spec:
      schedule: "CRON_TZ=Asia/Tokyo */5 * * * *"
      suspend: true
      jobTemplate: { spec: { template: { spec: { containers: [ { name: t, image: busybox, command: [date] } ] } } } }
  - apiVersion: batch/v1
    kind: CronJob
    metadata: { name: plain }
    spec:
      schedule: "@hourly"
      jobTemplate: { spec: { template: { spec: { containers: [ { name: p, image: busybox, command: ["true"] } ] } } } }
"#;
        let got = parse(list, "list.yaml", &Options { prefix: Some("k8s".into()), timezone: None }).unwrap();
        let summary: Vec<_> = got
            .jobs
            .iter()
            .map(|(_, j)| {
                (j.name.as_str(), j.schedule.as_str(), j.timezone.as_str(), j.overlap, j.paused, j.retries.max)
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("k8s-tick", "*/5 * * * *", "Asia/Tokyo", Overlap::Allow, true, 6),
                ("k8s-plain", "@hourly", "UTC", Overlap::Allow, false, 6)
            ]
        );
        assert!(got.notes.iter().any(|n| n.contains("read as UTC")), "{:?}", got.notes);
    }

    #[test]
    fn what_cronrun_cannot_run_is_left_out_with_the_reason() {
        let text = r#"
kind: CronJob
metadata: { name: entrypoint }
spec:
  schedule: "0 * * * *"
  jobTemplate: { spec: { template: { spec: { containers: [ { name: e, image: app:1 } ] } } } }
---
kind: CronJob
metadata: { name: sidecar }
spec:
  schedule: "0 * * * *"
  jobTemplate: { spec: { template: { spec: { containers: [ { name: a, command: [a] }, { name: b, command: [b] } ] } } } }
---
kind: Deployment
metadata: { name: web }
"#;
        let got = parse(text, "f.yaml", &options()).unwrap();
        assert!(got.jobs.is_empty());
        let skipped: Vec<(&str, &str)> = got.skipped.iter().map(|(p, why)| (p.as_str(), why.as_str())).collect();
        assert!(skipped[0].0 == "CronJob entrypoint" && skipped[0].1.contains("no command"), "{skipped:?}");
        assert!(skipped[1].0 == "CronJob sidecar" && skipped[1].1.contains("2 containers"), "{skipped:?}");
        assert_eq!(skipped[2], ("Deployment web", "not a CronJob"));
    }

    /// Wrong input is an error naming the file, the document and the CronJob.
    #[test]
    fn bad_cron_jobs_are_errors_naming_where() {
        let job = |spec: &str| {
            format!(
                "kind: CronJob\nmetadata: {{ name: bad }}\nspec:\n  {spec}\n  jobTemplate: {{ spec: {{ template: {{ spec: \
                 {{ containers: [ {{ name: c, command: [x] }} ] }} }} }} }}\n"
            )
        };
        let cases = [
            (job("schedule: \"61 * * * *\""), "document 1: CronJob bad: schedule"),
            (job("schedule: \"* * * * *\"\n  concurrencyPolicy: Sometimes"), "concurrencyPolicy \"Sometimes\""),
            (job("schedule: \"* * * * *\"\n  startingDeadlineSeconds: -5"), "startingDeadlineSeconds is not a count"),
            (job("schedule: \"* * * * *\"\n  timeZone: Mars/Olympus"), "CronJob bad: timezone"),
            (job("suspend: true"), "no spec.schedule"),
            ("kind: CronJob\nspec: {}\n".into(), "without metadata.name"),
            ("kind: [unclosed\n".into(), "f.yaml: document 1: not YAML"),
            (
                format!("{}---\n{}", job("schedule: \"@daily\""), job("schedule: \"@daily\"")),
                "two CronJobs become job bad",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(&text, "f.yaml", &options()).unwrap_err().to_string();
            assert!(err.contains(expected) && !err.contains('\n'), "{text}: {err}");
        }
    }
}

//! `jobs.toml` for `cronrun apply -f`: a list of `[[job]]` tables.

use serde::Deserialize;

use super::JobSpec;
use crate::error::Error;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobsFile {
    #[serde(default)]
    job: Vec<JobSpec>,
}

/// Parses and validates every job of a file; `origin` (the path) prefixes errors, with the
/// line where TOML can tell it. All jobs are checked before any is returned, so a caller
/// writes all or nothing.
pub fn parse_jobs_file(text: &str, origin: &str) -> Result<Vec<JobSpec>, Error> {
    let file: JobsFile = toml::from_str(text).map_err(|e| Error::invalid("file", toml_error(text, origin, &e)))?;
    if file.job.is_empty() {
        return Err(Error::invalid("file", format!("{origin}: no [[job]] tables found")));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, spec) in file.job.iter().enumerate() {
        spec.validate()
            .map_err(|e| Error::invalid("file", format!("{origin}: job {} ({:?}): {e}", i + 1, spec.name)))?;
        if !seen.insert(spec.name.as_str()) {
            return Err(Error::invalid("file", format!("{origin}: job {:?} appears twice", spec.name)));
        }
    }
    Ok(file.job)
}

impl JobSpec {
    /// The spec as one `[[job]]` table of a jobs file, in its stored form: fields at their
    /// defaults are left out, so an exported file reads like one written by hand, and
    /// `parse_jobs_file` reads it back to an equal spec (`cronrun export` checks that).
    /// Fails for what TOML cannot hold (a `null` in `input_schema`).
    pub fn to_jobs_toml(&self) -> Result<String, Error> {
        #[derive(serde::Serialize)]
        struct One<'a> {
            job: [&'a JobSpec; 1],
        }
        let _storing = super::defaults::Storing::begin();
        toml::to_string(&One { job: [self] })
            .map_err(|e| Error::invalid("spec", format!("job {:?} cannot be written as TOML: {e}", self.name)))
    }
}

/// `origin:line: message` on one line, for a TOML error in `text`.
pub fn toml_error(text: &str, origin: &str, e: &toml::de::Error) -> String {
    let line = e.span().map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
    let at = line.map(|l| format!("{origin}:{l}")).unwrap_or(origin.to_string());
    format!("{at}: {}", e.message().replace('\n', " "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_jobs() {
        let jobs = parse_jobs_file(
            "[[job]]\nname = \"a\"\nschedule = \"@daily\"\nshell = \"echo a\"\n\n\
             [[job]]\nname = \"b\"\nschedule = \"*/5 * * * *\"\ntimeout = \"10s\"\n\
             shell = { argv = [\"echo\", \"b\"] }\n",
            "jobs.toml",
        )
        .unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[1].shell.as_ref().unwrap().argv.as_ref().unwrap()[1], "b");
    }

    /// Every kind of field, written back as TOML and read again, is the same spec.
    #[test]
    fn a_spec_written_as_toml_reads_back_the_same() {
        let text = r#"
[[job]]
name = "every-field"
schedule = "0 3 * * *"
timezone = "Europe/Berlin"
dst = "twice"
timeout = "1h30m"
overlap = "queue"
lock = true
catchup = "latest"
catchup_window = "2h"
starting_deadline = "90s"
retries = { max = 3, backoff = "1s500ms" }
jitter = "10s"
pool = "etl"
paused = true
history = { succeeded = 3, failed = 20 }
output_lines = 7
description = "multi\nline \"quoted\""
labels = { team = "ops", "cronrun.io/owner" = "jobs.toml" }
input_schema = { type = "object", properties = { n = { type = "integer", maximum = 5.5 } }, required = ["n"] }
after = [{ job = "extract", on = "failed" }]
notify = [{ on = ["failed"], webhook = "https://example.com/hook" }]
shell = { argv = ["echo", "a b"], env = { A = "1", B = { secret = "db" } }, cwd = "/tmp" }

[[job]]
name = "wasm"
schedule = "@every 5m"
lock = "shared"
on = { subject = "orders.created", redeliver = 2 }
overlap = "allow"
wasm = { plugin = "sha256-0000000000000000000000000000000000000000000000000000000000000000", config = { k = "v", s = { secret = "token" } }, allow_publish = ["a.>"], allow_http = ["https://example.com"], allow_kv = true }

[[job]]
name = "plain"
schedule = "@daily"
shell = "echo plain"
"#;
        let jobs = parse_jobs_file(text, "jobs.toml").unwrap();
        let written: String = jobs.iter().map(|j| j.to_jobs_toml().unwrap()).collect::<Vec<_>>().join("\n");
        let again = parse_jobs_file(&written, "exported").unwrap();
        assert_eq!(again, jobs, "{written}");
        // Defaults are left out, as in KV.
        let plain = jobs[2].to_jobs_toml().unwrap();
        assert!(!plain.contains("timezone") && !plain.contains("retries") && !plain.contains("dst"), "{plain}");
        assert!(jobs[0].to_jobs_toml().unwrap().contains("dst = \"twice\""));
    }

    #[test]
    fn errors_say_file_line_and_field() {
        let err = parse_jobs_file(
            "[[job]]\nname = \"a\"\nschedule = \"@daily\"\nshell = \"x\"\ncolour = \"red\"\n",
            "jobs.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("jobs.toml:5: "), "{err}");
        assert!(err.contains("colour"), "{err}");
        assert!(!err.contains('\n'));

        let err =
            parse_jobs_file("[[job]]\nname = \"a\"\nschedule = \"* * * * * * * *\"\nshell = \"x\"\n", "jobs.toml")
                .unwrap_err()
                .to_string();
        assert!(err.contains("job 1 (\"a\"): schedule:"), "{err}");

        let err = parse_jobs_file(
            "[[job]]\nname = \"a\"\nschedule = \"30 2 * * *\"\ndst = \"sometimes\"\nshell = \"x\"\n",
            "jobs.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("jobs.toml:4: dst \"sometimes\" is not a choice"), "{err}");
        assert!(err.contains("\"skip\" or \"twice\"") && !err.contains('\n'), "{err}");

        let dup = "[[job]]\nname = \"a\"\nschedule = \"@daily\"\nshell = \"x\"\n";
        let err = parse_jobs_file(&format!("{dup}{dup}"), "f").unwrap_err().to_string();
        assert!(err.contains("appears twice"), "{err}");
    }
}

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

        let dup = "[[job]]\nname = \"a\"\nschedule = \"@daily\"\nshell = \"x\"\n";
        let err = parse_jobs_file(&format!("{dup}{dup}"), "f").unwrap_err().to_string();
        assert!(err.contains("appears twice"), "{err}");
    }
}

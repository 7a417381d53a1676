//! crontab(5) to job specs, line by line, without I/O. What cron does and how it maps:
//!
//! - `NAME=value` lines (quotes stripped) set the environment of the entries after them;
//!   `CRON_TZ` sets their time zone (`TZ`, as in cronie, only their environment), `SHELL`
//!   the shell that runs them (as an argv
//!   `[SHELL, "-c", CMD]`), `MAILTO` and `MAILFROM` are noted and dropped (cronrun sends
//!   no mail: use `notify`).
//! - An entry is five fields (six with the user column of /etc/crontab and cron.d, whose
//!   user becomes `shell.user`) or a macro, then the command. `@reboot` has no equivalent
//!   and is not imported, with the reason.
//! - In the command, the first unescaped `%` ends it; the rest, each `%` a newline, is its
//!   standard input (fed by `printf`); `\%` is a plain `%`.
//! - cron starts a run whatever the previous one does: `overlap = "allow"`.

use std::collections::BTreeMap;

use super::{ImportError, Imported};
use crate::spec::{JobSpec, Overlap, ShellSpec};

/// How to read the file.
pub struct Options {
    /// Job names are `<prefix>-<line>`.
    pub prefix: String,
    /// The zone of entries before any `CRON_TZ`/`TZ` line (cron's: the system's).
    pub timezone: String,
    /// Lines carry a user column after the fields (/etc/crontab, /etc/cron.d).
    pub system: bool,
    /// The user every job runs as (a user's own crontab), unless the line names one.
    pub user: Option<String>,
}

const MACROS: [&str; 7] = ["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"];

/// Reads `text`; a line that is neither blank, a comment, a setting nor an entry is an
/// error naming it, and so is an entry whose job would not validate.
pub fn parse(text: &str, origin: &str, options: &Options) -> Result<Imported, ImportError> {
    let mut out = Imported::default();
    let mut env: BTreeMap<String, crate::spec::secret::Value> = BTreeMap::new();
    let mut timezone = options.timezone.clone();
    let mut shell: Option<String> = None;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let at = ImportError::at(format!("{origin}:{n}"));
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((name, value)) = setting(line) {
            match name.as_str() {
                "CRON_TZ" => {
                    crate::schedule::parse_timezone(&value)
                        .map_err(|e| at(ImportError::Setting { name: name.clone(), source: Box::new(e) }))?;
                    timezone = value;
                }
                "SHELL" => shell = Some(value).filter(|s| s != "/bin/sh"),
                "MAILTO" | "MAILFROM" => {
                    out.notes.push(format!("line {n}: {name} is not used: cronrun sends no mail (see notify)"));
                }
                _ => {
                    env.insert(name, value.into());
                }
            }
            continue;
        }
        let (schedule, rest) = match line.split_whitespace().next() {
            Some("@reboot") => {
                out.skipped.push((
                    format!("line {n}"),
                    "@reboot has no equivalent (cronrun has no boot event): start it from a systemd unit".into(),
                ));
                continue;
            }
            Some(m) if m.starts_with('@') => {
                if !MACROS.contains(&m) {
                    return Err(at(format!("{m} is not a cron macro").into()));
                }
                (m.to_string(), line[m.len()..].trim_start())
            }
            Some(f) if f.starts_with(|c: char| c.is_ascii_digit() || c == '*') => {
                let (fields, rest) =
                    split_fields(line, 5).ok_or_else(|| at("an entry needs five time fields and a command".into()))?;
                (fields.join(" "), rest)
            }
            _ => {
                let why = format!("{:?} is neither a setting (NAME=value) nor an entry", truncate(line));
                return Err(at(why.into()));
            }
        };
        let (user, command) = match options.system {
            true => split_fields(rest, 1)
                .map(|(u, c)| (Some(u[0].to_string()), c))
                .ok_or_else(|| at("a system crontab entry needs a user and a command".into()))?,
            false => (options.user.clone(), rest),
        };
        let (command, input) = split_input(command);
        if command.trim().is_empty() {
            return Err(at("the entry has no command".into()));
        }
        let command = match input {
            Some(text) => format!("printf '%s' {} | ( {command} )", quote(&text)),
            None => command,
        };
        let shell_spec = match &shell {
            Some(sh) => ShellSpec { argv: Some(vec![sh.clone(), "-c".into(), command]), ..Default::default() },
            None => ShellSpec { command: Some(command), ..Default::default() },
        };
        let mut spec = JobSpec::shell(
            &format!("{}-{n}", options.prefix),
            &schedule,
            ShellSpec { env: env.clone(), user, ..shell_spec },
        );
        spec.timezone = timezone.clone();
        spec.overlap = Overlap::Allow;
        spec.description = format!("imported from {origin}:{n}");
        spec.validate().map_err(|e| at(e.into()))?;
        out.jobs.push((format!("line {n}"), spec));
    }
    Ok(out)
}

/// `NAME=value` (spaces around `=` allowed, quotes around the value stripped).
fn setting(line: &str) -> Option<(String, String)> {
    let (name, value) = line.split_once('=')?;
    let name = name.trim();
    let valid = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if !valid {
        return None;
    }
    let value = value.trim();
    let unquoted = ['"', '\''].iter().find_map(|q| value.strip_prefix(*q)?.strip_suffix(*q));
    Some((name.to_string(), unquoted.unwrap_or(value).to_string()))
}

/// The first `n` whitespace-separated words of `line` and the rest (leading space cut).
fn split_fields(line: &str, n: usize) -> Option<(Vec<&str>, &str)> {
    let mut rest = line.trim_start();
    let mut fields = Vec::with_capacity(n);
    for _ in 0..n {
        let end = rest.find(char::is_whitespace)?;
        fields.push(&rest[..end]);
        rest = rest[end..].trim_start();
    }
    (!rest.is_empty()).then_some((fields, rest))
}

/// The command before the first unescaped `%`, and what follows as standard input (each
/// further `%` a newline); `\%` is a plain `%` in both.
fn split_input(command: &str) -> (String, Option<String>) {
    let (mut parts, mut current) = (Vec::new(), String::new());
    let mut chars = command.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'%') => {
                chars.next();
                current.push('%');
            }
            '%' => parts.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    parts.push(current);
    let command = parts.remove(0);
    let input = (!parts.is_empty()).then(|| parts.join("\n"));
    (command, input)
}

/// `text` in single quotes for /bin/sh.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

fn truncate(line: &str) -> String {
    line.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(system: bool) -> Options {
        Options { prefix: "cron".into(), timezone: "UTC".into(), system, user: None }
    }

    #[test]
    fn lines_become_jobs_settings_apply_to_what_follows_and_reboot_is_left_out() {
        let text = "# nightly things\n\
                    MAILTO=ops@example.com\n\
                    PATH = /usr/bin:/bin\n\
                    0 2 * * * /usr/local/bin/backup --full\n\
                    CRON_TZ=Europe/Paris\n\
                    GREETING=\"hello world\"\n\
                    */15 9-17 * * mon-fri echo 100\\% done %line one%line two\n\
                    @reboot /usr/local/bin/warm-cache\n\
                    SHELL=/bin/bash\n\
                    @daily [[ -d /tmp ]] && echo ok\n";
        let got = parse(text, "crontab", &options(false)).unwrap();
        let summary: Vec<(&str, &str, &str, &str)> = got
            .jobs
            .iter()
            .map(|(from, j)| (from.as_str(), j.name.as_str(), j.schedule.as_str(), j.timezone.as_str()))
            .collect();
        assert_eq!(
            summary,
            [
                ("line 4", "cron-4", "0 2 * * *", "UTC"),
                ("line 7", "cron-7", "*/15 9-17 * * mon-fri", "Europe/Paris"),
                ("line 10", "cron-10", "@daily", "Europe/Paris")
            ]
        );
        let shell = |i: usize| got.jobs[i].1.shell.clone().unwrap();
        assert_eq!(shell(0).command.as_deref(), Some("/usr/local/bin/backup --full"));
        assert_eq!(shell(0).env, BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".into())]));
        assert_eq!(shell(1).command.as_deref(), Some("printf '%s' 'line one\nline two' | ( echo 100% done  )"));
        assert_eq!(shell(1).env.get("GREETING").and_then(|v| v.plain()), Some("hello world"));
        assert_eq!(shell(2).argv, Some(vec!["/bin/bash".into(), "-c".into(), "[[ -d /tmp ]] && echo ok".into()]));
        assert!(got.jobs.iter().all(|(_, j)| j.overlap == Overlap::Allow));
        assert_eq!(got.skipped.len(), 1);
        assert!(got.skipped[0].0 == "line 8" && got.skipped[0].1.contains("@reboot has no equivalent"));
        assert!(got.notes[0].contains("MAILTO is not used"), "{:?}", got.notes);
    }

    #[test]
    fn a_system_crontab_names_the_user_of_each_line() {
        let got =
            parse("17 * * * * root cd / && run-parts /etc/cron.hourly\n", "/etc/crontab", &options(true)).unwrap();
        let shell = got.jobs[0].1.shell.clone().unwrap();
        assert_eq!(
            (shell.user.as_deref(), shell.command.as_deref()),
            (Some("root"), Some("cd / && run-parts /etc/cron.hourly"))
        );
    }

    #[test]
    fn bad_lines_are_errors_naming_file_and_line() {
        let cases = [
            ("0 2 * *\n", "crontab:1: an entry needs five time fields"),
            ("61 * * * * true\n", "crontab:1: "),
            ("@sometimes true\n", "crontab:1: @sometimes is not a cron macro"),
            ("\n\nhello there\n", "crontab:3: \"hello there\" is neither a setting"),
            ("CRON_TZ=Mars/Olympus\n", "crontab:1: CRON_TZ"),
            ("0 2 * * * %only input\n", "crontab:1: the entry has no command"),
        ];
        for (text, expected) in cases {
            let err = parse(text, "crontab", &options(false)).unwrap_err().to_string();
            assert!(err.starts_with(expected), "{text:?}: {err}");
        }
        let err = parse("0 2 * * * root\n", "crontab", &options(true)).unwrap_err().to_string();
        assert!(err.contains("needs a user and a command"), "{err}");
    }
}

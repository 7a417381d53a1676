//! What a run's supervisor starts: a `shell` command under `/bin/sh -c`, or an `exec`
//! argv as given.
//!
//! A shell command that is one simple command of plain words (`date +%s%N`,
//! `/opt/backup/run --full`) starts without the shell when `/bin/sh` is dash, as Debian's
//! is: dash runs such a command by exec'ing its first word, found in `PATH`, with the other
//! words as arguments, in its own process, so the shell is only the cost of starting it
//! (0.6 ms of CPU of the 1.2 a `sh -c 'date'` takes here). The supervisor does that exec
//! itself, with the environment dash would give it (dash adds `PWD`, see `shell_pwd`; an
//! environment dash would change otherwise takes the shell, see
//! `environment_passes_through`).
//! Should it fail (not found, not executable, a script without `#!`), the command is
//! started under `/bin/sh -c` after all, so that its errors and exit codes (127, 126) are
//! the shell's own. Any other shell, or any word the shell would read as syntax, a builtin
//! or a reserved word, takes the shell.

use std::ffi::OsString;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The shell every `shell` command is for.
const SHELL: &str = "/bin/sh";

/// How a run's job starts.
#[derive(Debug, PartialEq)]
pub enum Plan<'a> {
    /// `/bin/sh -c COMMAND`.
    Shell(&'a str),
    /// The words of a plain `shell` command, exec'd as dash would; `/bin/sh -c` if that fails.
    Direct { words: Vec<&'a str>, command: &'a str },
    /// An `exec` argv.
    Exec(&'a str, &'a [String]),
}

impl<'a> Plan<'a> {
    /// The plan for `shell COMMAND` or `exec PROGRAM ARGS...`, where `direct` says whether
    /// plain commands may skip the shell (`/bin/sh` is dash, and for a run, its environment
    /// passes through dash as it is). None for other arguments.
    pub fn of(args: &'a [String], direct: bool) -> Option<Self> {
        match args {
            [mode, command] if mode == "shell" => Some(match plain_words(command).filter(|_| direct) {
                Some(words) => Plan::Direct { words, command },
                None => Plan::Shell(command),
            }),
            [mode, program, rest @ ..] if mode == "exec" => Some(Plan::Exec(program, rest)),
            _ => None,
        }
    }

    /// The process to start: for `Direct`, its first word exec'd (the fallback is `start`'s),
    /// with `PWD` as dash would give it in this process's environment.
    pub fn command(&self) -> Command {
        let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        self.command_in(&env)
    }

    /// The process to start in the environment `env` (which it does not set).
    fn command_in(&self, env: &[(OsString, OsString)]) -> Command {
        match self {
            Plan::Shell(command) => shell(command),
            Plan::Direct { words, command } => match shell_pwd(env) {
                Some(pwd) => {
                    let mut cmd = Command::new(words[0]);
                    cmd.args(&words[1..]).env("PWD", pwd);
                    cmd
                }
                // dash says it cannot name a working directory (removed?): its words, then.
                None => shell(command),
            },
            Plan::Exec(program, args) => {
                let mut cmd = Command::new(program);
                cmd.args(*args);
                cmd
            }
        }
    }

    /// What the job runs, for messages: the command, or the program of an argv.
    pub fn program(&self) -> &str {
        match self {
            Plan::Shell(command) | Plan::Direct { command, .. } => command,
            Plan::Exec(program, _) => program,
        }
    }

    /// Starts the job: as `uid:gid` if given, its stdin `input` (`/dev/null` without), with
    /// exactly the environment `env`, `prepare`d (see `contain::RunCgroup::join`). The environment is given to the job's exec alone,
    /// after the child has set its groups (none but `gid`: std drops the supplementary
    /// groups when a root process sets a uid), its gid and its uid: the dynamic loader
    /// reads `LD_PRELOAD` and the like as the job's user, never as this process's.
    pub fn start(
        &self,
        run_as: Option<(u32, u32)>,
        input: Option<&File>,
        env: &[(OsString, OsString)],
        prepare: impl Fn(&mut Command),
    ) -> std::io::Result<Child> {
        let start = |mut cmd: Command| -> std::io::Result<Child> {
            prepare(&mut cmd);
            if let Some((uid, gid)) = run_as {
                cmd.uid(uid).gid(gid);
            }
            let stdin = match input {
                Some(file) => Stdio::from(file.try_clone()?),
                None => Stdio::null(),
            };
            // `PWD` set by `command_in` wins over the one in `env`, as dash's would.
            let pwd = cmd.get_envs().find(|(name, _)| *name == "PWD").and_then(|(_, v)| v.map(OsString::from));
            cmd.env_clear().envs(env.iter().map(|(n, v)| (n, v)));
            if let Some(pwd) = pwd {
                cmd.env("PWD", pwd);
            }
            cmd.stdin(stdin).spawn()
        };
        let started = start(self.command_in(env));
        match self {
            Plan::Direct { command, .. } => started.or_else(|_| start(shell(command))),
            _ => started,
        }
    }
}

fn shell(command: &str) -> Command {
    let mut cmd = Command::new(SHELL);
    cmd.arg("-c").arg(command);
    cmd
}

/// Whether `/bin/sh` is dash, whose way with plain commands `Plan::Direct` follows.
pub fn shell_is_dash() -> bool {
    std::fs::canonicalize(SHELL).is_ok_and(|path| path.file_name().is_some_and(|name| name == "dash"))
}

/// The words of `command` if the shell would run it by exec'ing them as they are: words
/// of letters, digits and `_ - . / + % , : @ =` separated by spaces, the first neither an
/// assignment (`=`), a job (`%1` in bash), a builtin nor a reserved word. Anything else (quotes,
/// `$`, globs, `~`, `#`, redirections, operators, tabs, newlines, other bytes) is the
/// shell's to read.
fn plain_words(command: &str) -> Option<Vec<&str>> {
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"_-./+%,:@= ".contains(&b);
    if !command.bytes().all(plain) {
        return None;
    }
    let words: Vec<&str> = command.split(' ').filter(|w| !w.is_empty()).collect();
    let first = *words.first()?;
    let runs_itself = !first.contains('=') && !first.starts_with('%') && !SHELL_WORDS.contains(&first);
    runs_itself.then_some(words)
}

/// Builtins and reserved words of dash, bash and POSIX sh: a command starting with one is
/// the shell's (a name too many only costs the shell's start).
#[rustfmt::skip]
const SHELL_WORDS: &[&str] = &[
    ".", ":", "alias", "bg", "bind", "break", "builtin", "caller", "case", "cd", "chdir", "command",
    "compgen", "complete", "compopt", "continue", "coproc", "declare", "dirs", "disown", "do",
    "done", "echo", "elif", "else", "enable", "esac", "eval", "exec", "exit", "export", "false",
    "fc", "fg", "fi", "for", "function", "getopts", "hash", "help", "history", "if", "in", "jobs",
    "kill", "let", "local", "logout", "mapfile", "popd", "printf", "pushd", "pwd", "read",
    "readarray", "readonly", "return", "select", "set", "shift", "shopt", "source", "suspend",
    "test", "then", "time", "times", "trap", "true", "type", "typeset", "ulimit", "umask",
    "unalias", "unset", "until", "wait", "while",
];

/// Whether dash passes the environment `env` on as it is (but `PWD`): it drops
/// variables whose names are not shell names (`A-B`, `1X`), resets `IFS`, `OPTIND` and
/// `PPID`, and without `PATH` searches a default of its own that it does not export.
pub fn environment_passes_through(env: &[(OsString, OsString)]) -> bool {
    let shell_name = |name: &[u8]| {
        name.first().is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_')
            && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
    };
    let mut path = false;
    for (name, _) in env {
        let name = name.as_encoded_bytes();
        if !shell_name(name) || [&b"IFS"[..], b"OPTIND", b"PPID"].contains(&name) {
            return false;
        }
        path |= name == b"PATH";
    }
    path
}

/// `PWD` as dash exports it to what it runs: the inherited one if it names the working
/// directory, else the working directory's path. None if that cannot be found, where dash
/// prints an error of its own.
fn shell_pwd(env: &[(OsString, OsString)]) -> Option<OsString> {
    let here = std::fs::metadata(".").ok()?;
    let same = |path: &Path| std::fs::metadata(path).is_ok_and(|m| m.dev() == here.dev() && m.ino() == here.ino());
    match env.iter().rev().find(|(name, _)| name == "PWD").map(|(_, pwd)| pwd) {
        Some(pwd) if Path::new(&pwd).is_absolute() && same(Path::new(&pwd)) => Some(pwd.clone()),
        _ => std::env::current_dir().ok().map(OsString::from),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_commands_skip_the_shell_and_only_where_it_is_dash() {
        let direct = |command: &str| match Plan::of(&["shell".to_string(), command.to_string()], true) {
            Some(Plan::Direct { words, .. }) => Some(words.join("|")),
            Some(Plan::Shell(_)) => None,
            other => panic!("{command:?}: {other:?}"),
        };
        for (command, words) in [
            ("date +%s%N", "date|+%s%N"),
            ("  /opt/backup/run   --level=3 a,b:c@d ", "/opt/backup/run|--level=3|a,b:c@d"),
            ("sleep 600", "sleep|600"),
            ("./job.sh", "./job.sh"),
            ("/bin/echo hi", "/bin/echo|hi"),
        ] {
            assert_eq!(direct(command).as_deref(), Some(words), "{command:?}");
        }
        for command in [
            "",
            "   ",
            "echo hi",
            "true",
            "cd /tmp",
            "exit 3",
            "kill -9 1",
            "exec date",
            "time date",
            "if",
            ".",
            "A=1 date",
            "%1",
            "date; date",
            "date && date",
            "date | cat",
            "date > /tmp/x",
            "date < /tmp/x",
            "date &",
            "echo $HOME",
            "ls *",
            "ls ?",
            "ls [ab]",
            "ls ~",
            "date # comment",
            "date 'x'",
            "date \"x\"",
            "date \\n",
            "date\tx",
            "date\nx",
            "date `x`",
            "(date)",
            "{ date; }",
            "! date",
            "date ^x",
            "d\u{e9}j\u{e0}",
        ] {
            assert_eq!(direct(command), None, "{command:?} must go through the shell");
        }
        // Not dash: every command takes the shell; argv is exec'd as given.
        let args = ["shell".to_string(), "date".to_string()];
        assert_eq!(Plan::of(&args, false), Some(Plan::Shell("date")));
        let argv = ["exec".to_string(), "date".to_string(), "-u".to_string()];
        assert_eq!(Plan::of(&argv, true), Some(Plan::Exec("date", &argv[2..])));
        assert_eq!(Plan::of(&["shell".to_string()], true), None);
    }
}

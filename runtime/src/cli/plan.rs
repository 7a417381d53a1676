//! What `apply`, `apply --dry-run` and `diff` share: a jobs file read as `apply` writes it
//! (its owner recorded in each job), and what writing it would do to the stored jobs. One
//! reading and one comparison for all three, so that `diff` and a dry run say exactly
//! what `apply` then does: a job is unchanged when its stored spec equals the file's
//! parsed one, as `Store::put_job` decides, so formatting alone is never a difference.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::{Value, json};

use crate::spec::{JobSpec, parse_jobs_file};
use crate::store::{Store, StoredJob};

/// The label in which `apply --owner` records whose file a job comes from.
pub const OWNER_LABEL: &str = "cronrun.io/owner";

/// The longest owner name.
const MAX_OWNER: usize = 128;

#[derive(Args)]
pub struct SourceArgs {
    /// A TOML file of [[job]] tables; `-` reads standard input
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: PathBuf,
    /// Record NAME as the owner of every job of the file (label cronrun.io/owner); without
    /// it jobs keep the labels the file gives them
    #[arg(long, value_name = "NAME")]
    pub owner: Option<String>,
    /// Also remove the stored jobs of --owner that the file no longer names; a job of
    /// another owner or of none (`cronrun add`) is never removed
    #[arg(long, requires = "owner")]
    pub prune: bool,
    /// With --prune, remove only jobs that also have these labels
    #[arg(short = 'l', long, value_name = "K=V,...", requires = "prune")]
    pub selector: Option<String>,
    /// With --prune, accept a file without jobs: every job of --owner is removed
    #[arg(long, requires = "prune")]
    pub allow_empty: bool,
}

/// Labels a job must all have (`--selector team=ops,env=prod`).
#[derive(Debug, Default)]
pub struct Selector(Vec<(String, String)>);

impl Selector {
    /// `K=V[,K=V]...`; none given selects every job.
    pub fn parse(text: Option<&str>) -> Result<Self> {
        let Some(text) = text else { return Ok(Self::default()) };
        let pairs = text.split(',').map(|pair| match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => bail!("--selector {text:?}: each label must be KEY=VALUE, several separated by commas"),
        });
        Ok(Self(pairs.collect::<Result<_>>()?))
    }

    pub fn matches(&self, spec: &JobSpec) -> bool {
        self.0.iter().all(|(k, v)| spec.labels.get(k) == Some(v))
    }
}

/// A jobs file as `apply` would write it.
pub struct Source {
    /// The file's path, or `stdin`: the prefix of every error about it.
    pub origin: String,
    pub jobs: Vec<JobSpec>,
}

/// Reads, parses and checks the file of `a` (all jobs before any is returned), its owner
/// recorded in each job. Errors are one line naming the file and the job.
pub fn read(a: &SourceArgs) -> Result<Source> {
    if let Some(owner) = &a.owner {
        check_owner(owner)?;
    }
    let stdin = is_stdin(&a.file);
    let origin = if stdin { "stdin".to_string() } else { a.file.display().to_string() };
    let text = if stdin { read_stdin()? } else { super::read_definitions(&a.file)? };
    let mut jobs = parse(&text, &origin, a)?;
    if let Some(owner) = &a.owner {
        for spec in &mut jobs {
            own(spec, owner, &origin)?;
        }
    }
    for spec in &jobs {
        crate::input::check_schema(spec).with_context(|| origin.clone())?;
    }
    Ok(Source { origin, jobs })
}

/// Standard input, bounded as a file is (`read_definitions`).
fn read_stdin() -> Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let limit = super::MAX_DEFINITIONS_BYTES;
    std::io::stdin().take(limit + 1).read_to_end(&mut bytes).context("cannot read stdin")?;
    if bytes.len() as u64 > limit {
        bail!("stdin is over {limit} bytes, the most a definitions file may hold: split it");
    }
    String::from_utf8(bytes)
        .map_err(|e| anyhow::anyhow!("stdin: not UTF-8 text (byte {})", e.utf8_error().valid_up_to()))
}

/// The jobs of `text`. A file without any is refused (as `apply` always has: an emptied
/// file is more often a mistake than a wish), unless `--prune --allow-empty` says that
/// removing every job of the owner is meant.
fn parse(text: &str, origin: &str, a: &SourceArgs) -> Result<Vec<JobSpec>> {
    let refused = match parse_jobs_file(text, origin) {
        Ok(jobs) => return Ok(jobs),
        Err(e) => e,
    };
    // Read again only when refused: a file of 100,000 jobs is not parsed twice.
    let empty = toml::from_str::<toml::Table>(text)
        .is_ok_and(|t| t.iter().all(|(k, v)| k == "job" && v.as_array().is_some_and(Vec::is_empty)));
    match (empty, a.allow_empty, &a.owner) {
        (true, true, _) => Ok(Vec::new()),
        (true, false, Some(owner)) if a.prune => bail!(
            "{origin}: no [[job]] tables found: add --allow-empty to remove every job of owner {owner:?}, \
             if that is what you mean"
        ),
        _ => Err(refused.into()),
    }
}

/// An owner is a label value that a selector can name: 1 to 128 of `A-Z a-z 0-9 . _ - /`.
fn check_owner(owner: &str) -> Result<()> {
    let ok_chars = owner.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b));
    if !(1..=MAX_OWNER).contains(&owner.len()) || !ok_chars {
        bail!("--owner {owner:?} must be 1 to {MAX_OWNER} of A-Z a-z 0-9 . _ - /, e.g. the file's name");
    }
    Ok(())
}

/// Records `owner` in `spec`. A job whose file names another owner is refused: applying it
/// under this one would take it from a file it still belongs to.
fn own(spec: &mut JobSpec, owner: &str, origin: &str) -> Result<()> {
    let name = &spec.name;
    match spec.labels.get(OWNER_LABEL) {
        Some(theirs) if theirs != owner => bail!(
            "{origin}: job {name:?} is labelled {OWNER_LABEL} = {theirs:?}, not --owner {owner:?}: \
             remove the label, or apply the file with --owner {theirs:?}"
        ),
        _ => spec.labels.insert(OWNER_LABEL.to_string(), owner.to_string()),
    };
    // The label counts towards the spec's bounds (its size).
    spec.validate().with_context(|| format!("{origin}: job {name:?}"))
}

/// One field of a job that writing the file changes: `old` or `new` is None when absent.
#[derive(Debug, PartialEq)]
pub struct Field {
    pub path: String,
    pub old: Option<Value>,
    pub new: Option<Value>,
}

/// A stored job that the file changes.
#[derive(Debug)]
pub enum Change {
    /// Field by field.
    Fields(Vec<Field>),
    /// The stored spec is refused (why): the file's replaces it whole.
    Invalid(String),
}

/// What writing a file does, job by job.
#[derive(Debug, Default)]
pub struct Plan {
    pub create: Vec<String>,
    pub change: Vec<(String, Change)>,
    pub unchanged: usize,
    /// Jobs `--prune` removes, at the revision read: one changed since is not removed.
    pub remove: Vec<(String, u64)>,
}

impl Plan {
    /// Compares `source` with the stored jobs; with `--prune`, lists the owner's jobs (of
    /// `selector`) that the file does not name.
    pub async fn make(store: &Store, source: &Source, a: &SourceArgs, selector: &Selector) -> Result<Self> {
        let stored = store.list_jobs().await.context("reading the stored jobs")?;
        let by_name: BTreeMap<&str, &StoredJob> = stored.iter().map(|j| (j.name.as_str(), j)).collect();
        let mut plan = Plan::default();
        for spec in &source.jobs {
            match by_name.get(spec.name.as_str()).map(|j| &j.spec) {
                None => plan.create.push(spec.name.clone()),
                Some(Ok(old)) if old == spec => plan.unchanged += 1,
                Some(Ok(old)) => plan.change.push((spec.name.clone(), Change::Fields(fields(old, spec)?))),
                Some(Err(e)) => plan.change.push((spec.name.clone(), Change::Invalid(e.to_string()))),
            }
        }
        if let (true, Some(owner)) = (a.prune, &a.owner) {
            let named: HashSet<&str> = source.jobs.iter().map(|j| j.name.as_str()).collect();
            plan.remove = stored
                .iter()
                .filter(|j| !named.contains(j.name.as_str()))
                .filter(|j| j.spec.as_ref().is_ok_and(|s| owned_by(s, owner) && selector.matches(s)))
                .map(|j| (j.name.clone(), j.revision))
                .collect();
        }
        Ok(plan)
    }

    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.change.is_empty() && self.remove.is_empty()
    }

    /// One line per job created or removed and per field changed, as `diff` prints them.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self.create.iter().map(|name| format!("+ job {name}")).collect();
        for (name, change) in &self.change {
            match change {
                // Unequal specs whose every shown field is equal: said rather than hidden.
                Change::Fields(fields) if fields.is_empty() => {
                    lines.push(format!("~ job {name}: rewritten (it differs from the file only as stored)"))
                }
                Change::Fields(fields) => lines.extend(
                    fields.iter().map(|f| format!("~ job {name}: {} {} -> {}", f.path, shown(&f.old), shown(&f.new))),
                ),
                Change::Invalid(why) => {
                    lines.push(format!("~ job {name}: the stored spec is invalid ({why}): replaced"))
                }
            }
        }
        lines.extend(self.remove.iter().map(|(name, _)| format!("- job {name}")));
        lines
    }

    pub fn to_json(&self) -> Value {
        let change: Vec<Value> = self
            .change
            .iter()
            .map(|(name, change)| match change {
                Change::Fields(fields) => json!({ "name": name, "fields": fields.iter().map(|f| json!({
                    "field": f.path, "old": f.old, "new": f.new
                })).collect::<Vec<_>>() }),
                Change::Invalid(why) => json!({ "name": name, "invalid": why }),
            })
            .collect();
        let remove: Vec<&str> = self.remove.iter().map(|(name, _)| name.as_str()).collect();
        json!({ "create": self.create, "change": change, "remove": remove, "unchanged": self.unchanged })
    }
}

/// Whether `spec` was written by `apply --owner owner`.
pub fn owned_by(spec: &JobSpec, owner: &str) -> bool {
    spec.labels.get(OWNER_LABEL).is_some_and(|o| o == owner)
}

/// The fields that differ between two specs, by their path in the spec as `get` shows it
/// (every field, defaults included, so that a field set to its default is a change too).
pub fn fields(old: &JobSpec, new: &JobSpec) -> Result<Vec<Field>> {
    let (old, new) = (leaves(old)?, leaves(new)?);
    let paths: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    Ok(paths
        .into_iter()
        .filter(|p| old.get(*p) != new.get(*p))
        .map(|p| Field { path: p.clone(), old: old.get(p).cloned(), new: new.get(p).cloned() })
        .collect())
}

/// Every value of `spec` that is not an object, by its dotted path (`retries.max`,
/// `labels."cronrun.io/owner"`); lists are compared whole.
fn leaves(spec: &JobSpec) -> Result<BTreeMap<String, Value>> {
    fn walk(path: &str, value: &Value, out: &mut BTreeMap<String, Value>) {
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (k, v) in map {
                    walk(&join(path, k), v, out);
                }
            }
            _ => {
                out.insert(path.to_string(), value.clone());
            }
        }
    }
    let value = serde_json::to_value(spec).with_context(|| format!("reading job {:?} field by field", spec.name))?;
    let mut out = BTreeMap::new();
    walk("", &value, &mut out);
    Ok(out)
}

/// `path.key`, the key quoted as in TOML when it is not a bare one.
fn join(path: &str, key: &str) -> String {
    let bare = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    let key = if bare { key.to_string() } else { Value::from(key).to_string() };
    if path.is_empty() { key } else { format!("{path}.{key}") }
}

fn shown(value: &Option<Value>) -> String {
    value.as_ref().map_or("(none)".to_string(), Value::to_string)
}

/// Whether `-f` names standard input (`-`).
fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == "-"
}

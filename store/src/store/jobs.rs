//! Job specs in `cronrun_jobs`. A stored value that fails validation is kept as an error,
//! so `get` and `validate` can show why and nothing else trips over it.

use super::Store;
use super::kv::Versioned;
use crate::error::{Error, ErrorKind};
use crate::names::validate_job_name;
use std::collections::BTreeMap;

use crate::spec::after::{After, AfterOn, find_cycle};
use crate::spec::{History, JobSpec};

/// A job as stored: its revision and its spec, or why the stored JSON is refused.
#[derive(Debug, Clone)]
pub struct StoredJob {
    pub name: String,
    pub revision: u64,
    pub spec: Result<JobSpec, Error>,
}

impl StoredJob {
    pub fn decode(name: &str, v: &Versioned) -> Self {
        let spec = JobSpec::from_json(&v.value).and_then(|spec| Self::check_name(name, &spec).map(|()| spec));
        Self { name: name.to_string(), revision: v.revision, spec }
    }

    /// A spec must be stored under its own name.
    pub fn check_name(name: &str, spec: &JobSpec) -> Result<(), Error> {
        if spec.name == name {
            return Ok(());
        }
        Err(Error::invalid("name", format!("name: spec says {:?} but is stored under {name:?}", spec.name)))
    }
}

impl Store {
    pub async fn get_job(&self, name: &str) -> Result<StoredJob, Error> {
        validate_job_name(name)?;
        match self.jobs.get(name).await? {
            Some(v) => Ok(StoredJob::decode(name, &v)),
            None => Err(Error::not_found(format!("job {name:?} not found; `cronrun ls` lists jobs"))),
        }
    }

    pub async fn list_jobs(&self) -> Result<Vec<StoredJob>, Error> {
        let mut jobs: Vec<_> = self.jobs.scan(">").await?.iter().map(|(k, v)| StoredJob::decode(k, v)).collect();
        jobs.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(jobs)
    }

    /// Creates a job that must not exist yet.
    pub async fn create_job(&self, spec: &JobSpec) -> Result<u64, Error> {
        spec.validate()?;
        spec.check_grants(&self.names)?;
        self.jobs.create(&spec.name, spec.to_json()?, None).await.map_err(|e| match e.kind() {
            ErrorKind::AlreadyExists => Error::new(
                ErrorKind::AlreadyExists,
                format!("job {:?} already exists; use `cronrun apply` or `cronrun rm` first", spec.name),
            ),
            _ => e,
        })
    }

    /// Creates or replaces a job; unchanged specs are not rewritten.
    pub async fn put_job(&self, spec: &JobSpec) -> Result<(u64, bool), Error> {
        spec.validate()?;
        spec.check_grants(&self.names)?;
        if let Some(current) = self.jobs.get(&spec.name).await? {
            if JobSpec::from_json(&current.value).is_ok_and(|c| &c == spec) {
                return Ok((current.revision, false));
            }
            let rev = self.jobs.update(&spec.name, spec.to_json()?, current.revision, None).await?;
            return Ok((rev, true));
        }
        Ok((self.create_job(spec).await?, true))
    }

    /// Applies `change` to the current spec by compare-and-set, retrying a lost race.
    pub async fn modify_job(&self, name: &str, change: impl Fn(&mut JobSpec)) -> Result<(u64, bool), Error> {
        loop {
            let job = self.get_job(name).await?;
            let mut spec = job.spec?;
            let before = spec.clone();
            change(&mut spec);
            if spec == before {
                return Ok((job.revision, false));
            }
            match self.jobs.update(name, spec.to_json()?, job.revision, None).await {
                Ok(rev) => return Ok((rev, true)),
                Err(e) if e.is_conflict() => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Refuses `specs` if writing them would close a cycle of `after` edges with the jobs
    /// stored now (a cycle would start runs for ever), or leave a job after one that keeps
    /// no record of the endings it follows (chains follow run records: a record pruned as
    /// soon as it is written may never be seen). Returns the upstream jobs named that do
    /// not exist, for a warning: they may be added later.
    pub async fn check_chains(&self, specs: &[JobSpec]) -> Result<Vec<String>, Error> {
        let keeps_none = |h: &History| h.succeeded == 0 || h.failed == 0;
        if specs.iter().all(|s| s.after.is_empty() && !keeps_none(&s.history)) {
            return Ok(Vec::new());
        }
        let mut jobs: BTreeMap<String, (Vec<After>, History)> = BTreeMap::new();
        for job in self.list_jobs().await? {
            if let Ok(spec) = job.spec {
                jobs.insert(job.name, (spec.after, spec.history));
            }
        }
        for spec in specs {
            jobs.insert(spec.name.clone(), (spec.after.clone(), spec.history.clone()));
        }
        let graph = jobs.iter().map(|(name, (after, _))| (name.clone(), after.iter().map(|a| a.job.clone()).collect()));
        if let Some(cycle) = find_cycle(&graph.collect()) {
            let steps: Vec<String> = cycle.windows(2).map(|w| format!("{} runs after {}", w[0], w[1])).collect();
            return Err(Error::invalid(
                "after",
                format!(
                    "after: a cycle would start runs for ever ({}); remove one of these `after` entries",
                    steps.join(", ")
                ),
            ));
        }
        for (name, (after, _)) in &jobs {
            for a in after {
                let Some((_, history)) = jobs.get(&a.job) else { continue };
                let unkept = match a.on {
                    AfterOn::Succeeded => (history.succeeded == 0).then_some("succeeded"),
                    AfterOn::Failed => (history.failed == 0).then_some("failed"),
                    AfterOn::Finished => [(history.succeeded, "succeeded"), (history.failed, "failed")]
                        .into_iter()
                        .find_map(|(kept, kind)| (kept == 0).then_some(kind)),
                };
                if let Some(kind) = unkept {
                    return Err(Error::invalid(
                        "after",
                        format!(
                            "after: {name} runs after {}, which keeps no {kind} runs (history.{kind} = 0); \
                             chains follow run records: keep at least 1",
                            a.job
                        ),
                    ));
                }
            }
        }
        let mut missing: Vec<String> =
            specs.iter().flat_map(|s| &s.after).map(|a| a.job.clone()).filter(|j| !jobs.contains_key(j)).collect();
        missing.sort();
        missing.dedup();
        Ok(missing)
    }

    pub async fn delete_job(&self, name: &str) -> Result<(), Error> {
        let job = self.get_job(name).await?;
        self.jobs.delete_at(name, job.revision).await
    }
}

//! `<NS>_MESSAGES`: the stream that keeps the messages of jobs' trigger subjects (`on`)
//! until every job listening has run them (interest retention: a message no job listens
//! for is not kept). `apply` brings its subjects up to the `on` of every job; a deployment
//! without message triggers has no such stream.

use std::time::Duration;

use async_nats::jetstream::stream::{Config, DiscardPolicy, RetentionPolicy};

use super::Store;
use crate::error::Error;
use crate::spec::JobSpec;
use crate::spec::on::stream_subjects;

/// How long a message waits for its runs at most.
pub const MESSAGES_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Bytes of messages kept at most, the oldest dropped first.
pub const MESSAGES_MAX_BYTES: i64 = 1 << 30;

impl Store {
    /// Makes the messages stream capture the `on` subjects of the stored jobs and of
    /// `specs` (which replace stored jobs of their names), creating it for the first.
    pub async fn ensure_message_subjects(&self, specs: &[JobSpec]) -> Result<(), Error> {
        if specs.iter().all(|s| s.on.is_none()) {
            return Ok(());
        }
        let mut subjects: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
        for job in self.list_jobs().await? {
            if let Some(on) = job.spec.ok().and_then(|s| s.on) {
                subjects.insert(job.name, on.subject);
            }
        }
        for spec in specs {
            match &spec.on {
                Some(on) => subjects.insert(spec.name.clone(), on.subject.clone()),
                None => subjects.remove(&spec.name),
            };
        }
        let wanted = stream_subjects(subjects.values().map(String::as_str));
        let name = self.names.messages_stream();
        let refused = |e: &dyn std::fmt::Display| {
            Error::invalid(
                "on.subject",
                format!(
                    "on.subject: NATS refused {wanted:?} as the subjects of {name}: {e}; a subject another stream \
                     keeps cannot be a trigger"
                ),
            )
        };
        match self.js.get_stream(&name).await {
            Ok(mut stream) => {
                let mut config =
                    stream.info().await.map_err(|e| Error::nats("reading the messages stream", e))?.config.clone();
                if config.subjects == wanted {
                    return Ok(());
                }
                config.subjects = wanted.clone();
                self.js.update_stream(config).await.map_err(|e| refused(&e))?;
            }
            Err(_) => {
                let (replicas, placement) = match self.js.get_stream(self.names.dispatch_stream()).await {
                    Ok(mut dispatch) => dispatch
                        .info()
                        .await
                        .map(|i| (i.config.num_replicas, i.config.placement.clone()))
                        .unwrap_or((1, None)),
                    Err(_) => (1, None),
                };
                let config = Config {
                    name: name.clone(),
                    description: Some("cronrun: messages of jobs' trigger subjects (on)".into()),
                    subjects: wanted.clone(),
                    retention: RetentionPolicy::Interest,
                    max_age: MESSAGES_MAX_AGE,
                    max_bytes: MESSAGES_MAX_BYTES,
                    discard: DiscardPolicy::Old,
                    num_replicas: replicas,
                    // Where the layout is ([layout] placement), as the dispatch stream.
                    placement,
                    ..Default::default()
                };
                self.js.create_stream(config).await.map_err(|e| refused(&e))?;
            }
        }
        Ok(())
    }
}

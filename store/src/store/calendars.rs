//! Calendars, in the `<ns>_calendars` bucket: written by admins (`cronrun calendar
//! set|rm`), read by name by schedulers as a job's fires come, and by whatever shows a
//! job's next fires (`next`, `ls`, the dashboard, `backfill`). Like secrets, the bucket is
//! not part of the layout: the first `calendar set` creates it.
//!
//! A fire reads its calendars anew (through a cache of a second, which fires sharing an
//! instant share): a calendar changed takes effect at the job's next fire. A calendar a
//! job names and the bucket does not hold (removed with `rm --force`) excludes nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::layout::LEASE_MARKER_TTL;
use super::on_demand::OnDemand;
use crate::error::{Error, ErrorKind};
use crate::names::Names;
use crate::schedule::Schedule;
use crate::spec::calendar::{Calendar, validate_calendar_name};

/// How long a calendar read serves the fires after it.
const FRESH: Duration = Duration::from_secs(1);

/// A handle on the calendars bucket. Clones share the opened bucket and the cache.
#[derive(Clone, Debug)]
pub struct Calendars {
    bucket: OnDemand,
    read: Arc<Mutex<Reads>>,
}

/// Each calendar read lately, when, and what was found.
type Reads = HashMap<String, (Instant, Option<Arc<Calendar>>)>;

/// The calendars a job excludes, as read: which of them holds a fire's local date.
#[derive(Debug, Default, Clone)]
pub struct Excluded(Vec<Arc<Calendar>>);

/// The most excluded days in a row a search for a job's next fire passes over.
const MAX_EXCLUDED_DAYS: usize = 3660;

impl Excluded {
    /// Calendars as read (for tests and offline use).
    pub fn of(calendars: Vec<Calendar>) -> Self {
        Excluded(calendars.into_iter().map(Arc::new).collect())
    }

    /// The calendar whose days hold `fire`'s date in `tz`, if any.
    pub fn by(&self, fire: DateTime<Utc>, tz: Tz) -> Option<&str> {
        let date = fire.with_timezone(&tz).date_naive();
        self.0.iter().find(|c| c.contains(date)).map(|c| c.name.as_str())
    }

    /// The first fire of `schedule` after `after` whose local date no calendar holds. An
    /// excluded fire's whole day is passed over at once, so an every-second job excluded
    /// for a week costs seven steps; None past ten years of excluded days in a row.
    pub fn next_after(&self, schedule: &Schedule, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        let mut at = after;
        for _ in 0..MAX_EXCLUDED_DAYS {
            let fire = schedule.next_after(at, tz)?;
            if self.by(fire, tz).is_none() {
                return Some(fire);
            }
            at = start_of_next_day(fire, tz)? - chrono::Duration::milliseconds(1);
        }
        None
    }

    /// The fires of `schedule` after `after` that no calendar excludes.
    pub fn fires_after<'a>(
        &'a self,
        schedule: &'a Schedule,
        after: DateTime<Utc>,
        tz: Tz,
    ) -> impl Iterator<Item = DateTime<Utc>> + 'a {
        std::iter::successors(self.next_after(schedule, after, tz), move |fire| self.next_after(schedule, *fire, tz))
    }
}

/// The first instant of the local day after `t`'s in `tz` (its midnight, or the end of a
/// gap that skips it).
fn start_of_next_day(t: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
    use chrono::TimeZone;
    let midnight = t.with_timezone(&tz).date_naive().succ_opt()?.and_hms_opt(0, 0, 0)?;
    (0..=24 * 4).find_map(|quarter| {
        tz.from_local_datetime(&(midnight + chrono::Duration::minutes(15 * quarter))).earliest().map(|t| t.to_utc())
    })
}

impl Calendars {
    pub fn new(js: jetstream::Context, names: &Names) -> Self {
        Self { bucket: OnDemand::new(js, names, names.calendars_bucket(), "calendars"), read: Arc::default() }
    }

    /// Calendar `name` as stored now, None if there is none.
    pub async fn get(&self, name: &str) -> Result<Option<Calendar>, Error> {
        validate_calendar_name(name)?;
        let Some(store) = self.bucket.open().await? else { return Ok(None) };
        match self.bucket.bucket(store.clone()).get(name).await? {
            None => Ok(None),
            Some(stored) => Calendar::from_json(&stored.value).map(Some),
        }
    }

    /// The calendars of `names` that exist, each read at most a second ago.
    pub async fn excluded(&self, names: &[String]) -> Result<Excluded, Error> {
        let mut found = Vec::new();
        for name in names {
            let fresh = self.read.lock().ok().and_then(|read| {
                read.get(name).filter(|(at, _)| at.elapsed() < FRESH).map(|(_, calendar)| calendar.clone())
            });
            let calendar = match fresh {
                Some(calendar) => calendar,
                None => {
                    let calendar = self.get(name).await?.map(Arc::new);
                    if let Ok(mut read) = self.read.lock() {
                        read.insert(name.clone(), (Instant::now(), calendar.clone()));
                    }
                    calendar
                }
            };
            found.extend(calendar);
        }
        Ok(Excluded(found))
    }

    /// The names of `names` that hold no calendar (an admin's check at `apply`).
    pub async fn missing(&self, names: &[String]) -> Result<Vec<String>, Error> {
        let mut missing = Vec::new();
        for name in names {
            if self.get(name).await?.is_none() {
                missing.push(name.clone());
            }
        }
        Ok(missing)
    }

    /// Stores `calendar`, creating the bucket with `replicas` if it does not exist yet.
    pub async fn set(&self, calendar: &Calendar, replicas: usize) -> Result<u64, Error> {
        let config = kv::Config {
            description: "cronrun calendars: days the jobs that name them do not fire".into(),
            history: 5,
            num_replicas: replicas.max(1),
            limit_markers: Some(LEASE_MARKER_TTL),
            ..Default::default()
        };
        let store = self.bucket.open_or_create(config).await?;
        let value = serde_json::to_vec(calendar)
            .map_err(|e| Error::new(ErrorKind::Other, format!("encoding calendar {}: {e}", calendar.name)))?;
        self.bucket.bucket(store).put(&calendar.name, Bytes::from(value), None).await
    }

    /// Removes calendar `name`. False when there was none.
    pub async fn remove(&self, name: &str) -> Result<bool, Error> {
        if self.get(name).await?.is_none() {
            return Ok(false);
        }
        let Some(store) = self.bucket.open().await? else { return Ok(false) };
        self.bucket.bucket(store.clone()).purge(name, LEASE_MARKER_TTL).await?;
        Ok(true)
    }

    /// Every calendar, by name.
    pub async fn list(&self) -> Result<Vec<Calendar>, Error> {
        let Some(store) = self.bucket.open().await? else { return Ok(Vec::new()) };
        let mut names = self.bucket.bucket(store.clone()).keys(">").await?;
        names.sort();
        let mut calendars = Vec::with_capacity(names.len());
        for name in names {
            calendars.extend(self.get(&name).await?);
        }
        Ok(calendars)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    /// Berlin's 2026 holidays around Easter (Good Friday 3 April, Easter Monday 6 April)
    /// and the DST change of 29 March (a Sunday).
    fn holidays() -> Excluded {
        Excluded::of(vec![Calendar::parse("holidays", "2026-04-03\n2026-04-06\n2026-03-30\n", "t").unwrap()])
    }

    #[test]
    fn fires_on_excluded_days_are_passed_over_in_the_jobs_zone() {
        let tz: Tz = "Europe/Berlin".parse().unwrap();
        let weekdays = Schedule::parse("0 6 * * 1-5").unwrap();
        let fires: Vec<_> = holidays().fires_after(&weekdays, at("2026-03-27T00:00:00Z"), tz).take(6).collect();
        // 27 March 06:00 CET = 05:00 UTC; from 31 March 06:00 CEST = 04:00 UTC.
        let want = [
            "2026-03-27T05:00:00Z",
            "2026-03-31T04:00:00Z",
            "2026-04-01T04:00:00Z",
            "2026-04-02T04:00:00Z",
            "2026-04-07T04:00:00Z",
            "2026-04-08T04:00:00Z",
        ]
        .map(at);
        assert_eq!(fires, want);
        // The local date decides: 23:30 UTC on 2 April is 3 April in Berlin.
        let late = Schedule::parse("30 23 * * *").unwrap();
        assert_eq!(holidays().by(at("2026-04-02T23:30:00Z"), tz), Some("holidays"));
        assert_eq!(
            holidays().next_after(&late, at("2026-04-02T00:00:00Z"), chrono_tz::UTC),
            Some(at("2026-04-02T23:30:00Z"))
        );
        // An every-second job resumes at the first second of the next day.
        let every = Schedule::parse("* * * * * *").unwrap();
        assert_eq!(holidays().next_after(&every, at("2026-04-03T10:00:00Z"), tz), Some(at("2026-04-03T22:00:00Z")));
        // A calendar of every day: no fire, and the search ends.
        let all = Excluded::of(vec![Calendar::parse("all", "1970-01-01..2199-12-31", "t").unwrap()]);
        assert_eq!(all.next_after(&every, at("2026-04-03T10:00:00Z"), tz), None);
        assert_eq!(
            Excluded::default().next_after(&weekdays, at("2026-04-03T00:00:00Z"), tz),
            Some(at("2026-04-03T04:00:00Z"))
        );
    }
}

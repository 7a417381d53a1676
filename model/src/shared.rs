//! Values shared by the jobs that have equal ones. A leader holds one summary per job of
//! its shards, millions in a large deployment, and most jobs share a handful of schedule
//! expressions (`0 * * * *`, `*/5 * * * *`, ...) and pools: each distinct one is kept once
//! (a parsed schedule is about 100 bytes with its text) instead of once per job.

use std::sync::{Arc, LazyLock, Mutex, Weak};

use foldhash::HashMap;

use std::borrow::Cow;

use cronrun_time::{Dst, Schedule, ScheduleError};

/// Values in use, by their text; an entry whose jobs are all gone is dropped when the map
/// has doubled since it was last swept.
struct Shared<T: ?Sized> {
    by_text: HashMap<Box<str>, Weak<T>>,
    sweep_at: usize,
}

const SWEEP_FLOOR: usize = 1024;

impl<T: ?Sized> Shared<T> {
    fn new() -> Mutex<Self> {
        Mutex::new(Self { by_text: HashMap::default(), sweep_at: SWEEP_FLOOR })
    }

    fn get(&self, text: &str) -> Option<Arc<T>> {
        self.by_text.get(text).and_then(Weak::upgrade)
    }

    fn insert(&mut self, text: &str, value: &Arc<T>) {
        if self.by_text.len() >= self.sweep_at {
            self.by_text.retain(|_, w| w.strong_count() > 0);
            self.sweep_at = (self.by_text.len() * 2).max(SWEEP_FLOOR);
        }
        self.by_text.insert(text.into(), Arc::downgrade(value));
    }
}

static SCHEDULES: LazyLock<Mutex<Shared<Schedule>>> = LazyLock::new(Shared::new);
static POOLS: LazyLock<Mutex<Shared<str>>> = LazyLock::new(Shared::new);

/// The schedule `expr` says for job `job`, its fixed times placed by `dst`: the one already
/// in use for that text and choice, else parsed. Looked up before parsing, which is most
/// of the saving: a scheduler loading millions of jobs parses each distinct expression
/// once, not once per job. Keyed by the text with its `H` items resolved for the job, since
/// those differ from job to job, and by the DST choice (`debian` shares the bare text).
pub fn schedule(expr: &str, job: &str, dst: Dst) -> Result<Arc<Schedule>, ScheduleError> {
    let resolved = Schedule::resolve(expr, job)?;
    let key: Cow<'_, str> = match dst {
        Dst::Debian => Cow::Borrowed(&resolved),
        // No expression has a field `dst=...`, so this key is no other expression's.
        _ => Cow::Owned(format!("{resolved} dst={dst}")),
    };
    if let Some(found) = SCHEDULES.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(found);
    }
    // Parsed outside the lock; two parsing the same text at once both keep theirs valid.
    let schedule = Arc::new(Schedule::parse(&resolved)?.with_dst(dst));
    SCHEDULES.lock().unwrap_or_else(|p| p.into_inner()).insert(&key, &schedule);
    Ok(schedule)
}

/// The pool named `name`, shared.
pub fn pool(name: &str) -> Arc<str> {
    let mut shared = POOLS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(found) = shared.get(name) {
        return found;
    }
    let pool: Arc<str> = name.into();
    shared.insert(name, &pool);
    pool
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_are_shared_and_unused_ones_are_swept() {
        let parse = |expr: &str| schedule(expr, "job", Dst::Debian).unwrap();
        let (a, b) = (parse("*/7 * * * * *"), parse("*/7 * * * * *"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &parse("*/8 * * * * *")));
        assert!(Arc::ptr_eq(&pool("gpu"), &pool("gpu")));
        // Thousands used once and dropped: the map does not keep them all.
        for i in 0..5 * SWEEP_FLOOR {
            drop(parse(&format!("@every {}s", 1000 + i)));
        }
        let len = SCHEDULES.lock().unwrap().by_text.len();
        assert!(len < 3 * SWEEP_FLOOR, "{len} entries kept of {}", 5 * SWEEP_FLOOR);
        assert!(Arc::ptr_eq(&a, &parse("*/7 * * * * *")), "one in use stays shared");
        // A DST choice is part of the key: the default's schedule is not the other's.
        let (debian, skip) = (parse("30 2 * * *"), schedule("30 2 * * *", "job", Dst::Skip).unwrap());
        assert!(!Arc::ptr_eq(&debian, &skip) && (debian.dst(), skip.dst()) == (Dst::Debian, Dst::Skip));
        assert!(Arc::ptr_eq(&skip, &schedule("30 2 * * *", "other", Dst::Skip).unwrap()));
        // A refused expression is refused each time, and nothing is kept for it.
        assert!(
            schedule("61 * * * *", "job", Dst::Debian).is_err() && schedule("61 * * * *", "job", Dst::Skip).is_err()
        );
        assert!(SCHEDULES.lock().unwrap().get("61 * * * *").is_none());
    }

    #[test]
    fn h_is_shared_by_the_slot_it_resolves_to_not_by_its_text() {
        // `backup`'s `H` minute is 25 (the time crate's pinned vectors), `a`'s 40.
        let (backup, a) =
            (schedule("H 9 * * *", "backup", Dst::Debian).unwrap(), schedule("H 9 * * *", "a", Dst::Debian).unwrap());
        assert_eq!((backup.expr(), a.expr()), ("25 9 * * *", "40 9 * * *"));
        assert!(Arc::ptr_eq(&backup, &schedule("25 9 * * *", "other", Dst::Debian).unwrap()));
    }
}

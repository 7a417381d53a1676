//! Jenkins' `H`: a slot fixed per job by a hash of its name, so that a thousand jobs
//! written `H * * * *` spread over the hour and each keeps its minute forever (a job's
//! `jitter` instead moves each fire by a different delay).
//!
//! An `H` item is rewritten into plain cron before the expression is read, so a job fires
//! exactly as its resolved expression would (Debian cron's DST rule for a fixed minute
//! and hour included), and [`crate::Schedule::expr`] is that resolved text. Items (any
//! case, alone or in a list): `H` is one value of the field's range, `H(a-b)` one value
//! of `a-b`, `H/n` and `H(a-b)/n` every n-th value from an offset in `0..n` (written
//! `lo+offset-hi/n`). A bare `H`'s range is Jenkins': second and minute 0-59, hour 0-23,
//! day-of-month 1-28 (every month has it), month 1-12, day-of-week 0-6 (Sunday once). The
//! year field takes none: a hashed year would most likely be over.
//!
//! The slot is pinned like `jitter`'s delay: a new version must never move a job. It is
//! FNV-1a (64-bit) of the job's name, a zero byte and the field's name (`second`, `minute`,
//! `hour`, `day-of-month`, `month`, `day-of-week`, so a job's fields get independent
//! slots), mixed by splitmix64's finalizer, modulo the number of choices.

use std::borrow::Cow;

use super::ScheduleError;
use super::fields::{Ctx, DOM, DOW, FieldDef, HOUR, MINUTE, MONTH, SECOND, YEAR};

/// FNV-1a, 64-bit (the scheduler's shard and jitter hash).
fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// splitmix64's finalizer: FNV-1a's low bits, which the modulo keeps, vary too little
/// between names that differ in their last byte.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Job `job`'s slot in `0..n` (`n` >= 1) for the field named `field`: the pinned formula.
pub(crate) fn slot(job: &str, field: &str, n: u32) -> u32 {
    let h = mix(fnv1a(job.bytes().chain([0]).chain(field.bytes())));
    (h % u64::from(n)) as u32
}

/// `expr` with each `H` item of a cron expression resolved for `job`, borrowed as it is
/// when it has none. Without a job an `H` item is refused, as is a malformed one.
pub(crate) fn resolve<'a>(expr: &'a str, job: Option<&str>) -> Result<Cow<'a, str>, ScheduleError> {
    let text = expr.trim();
    if text.starts_with('@') || !text.bytes().any(|b| b.eq_ignore_ascii_case(&b'H')) {
        return Ok(Cow::Borrowed(expr));
    }
    let parts: Vec<&str> = text.split_whitespace().collect();
    let defs: &[&FieldDef] = match parts.len() {
        5 => &[&MINUTE, &HOUR, &DOM, &MONTH, &DOW],
        6 => &[&SECOND, &MINUTE, &HOUR, &DOM, &MONTH, &DOW],
        7 => &[&SECOND, &MINUTE, &HOUR, &DOM, &MONTH, &DOW, &YEAR],
        // Refused by the parser, naming the count.
        _ => return Ok(Cow::Borrowed(expr)),
    };
    let mut resolved = Vec::with_capacity(parts.len());
    for (def, part) in defs.iter().zip(&parts) {
        resolved.push(resolve_field(def, part, job)?);
    }
    if resolved.iter().all(|r| matches!(r, Cow::Borrowed(_))) {
        return Ok(Cow::Borrowed(expr));
    }
    Ok(Cow::Owned(resolved.join(" ")))
}

/// One field with its `H` items resolved; the other items keep their spelling.
fn resolve_field<'a>(def: &FieldDef, text: &'a str, job: Option<&str>) -> Result<Cow<'a, str>, ScheduleError> {
    let upper = text.to_ascii_uppercase();
    if !upper.split(',').any(|term| term.starts_with('H')) {
        return Ok(Cow::Borrowed(text));
    }
    let cx = Ctx { def, text, upper: &upper };
    let terms = upper.split(',').map(|term| match term.starts_with('H') {
        true => resolve_term(&cx, term, job),
        false => Ok(cx.orig(term).to_string()),
    });
    Ok(Cow::Owned(terms.collect::<Result<Vec<_>, _>>()?.join(",")))
}

/// `H`, `H/n`, `H(a-b)` or `H(a-b)/n` as the values it stands for.
fn resolve_term(cx: &Ctx<'_>, term: &str, job: Option<&str>) -> Result<String, ScheduleError> {
    let def = cx.def;
    let at = cx.at(term);
    let (lo, hi) = hash_range(def).ok_or_else(|| cx.err(format!("{at}H is not allowed in the year field")))?;
    let rest = &term[1..];
    let (range, step) = rest.split_once('/').map_or((rest, None), |(r, s)| (r, Some(s)));
    let (lo, hi) = match range {
        "" => (lo, hi),
        _ => {
            let inner = range.strip_prefix('(').and_then(|r| r.strip_suffix(')')).filter(|r| r.contains('-'));
            cx.range(inner.ok_or_else(|| cx.err(format!("{at}write H, H/n, H(a-b) or H(a-b)/n")))?)?
        }
    };
    let values = hi - lo + 1;
    let step = step.map(|s| cx.count(s, "step")).transpose()?;
    match step {
        Some(0) => return Err(cx.err(format!("{at}step must be at least 1"))),
        Some(n) if n > u64::from(values) => {
            return Err(cx.err(format!("{at}step {n} is more than the {values} values of {lo}-{hi}")));
        }
        _ => {}
    }
    let Some(job) = job else {
        return Err(cx.err(format!("{at}H needs the job's name to pick its slot: give it with --job NAME")));
    };
    Ok(match step {
        None => (lo + slot(job, def.name, values)).to_string(),
        Some(n) => format!("{}-{hi}/{n}", lo + slot(job, def.name, n as u32)),
    })
}

/// The values a bare `H` picks from (Jenkins'), `None` for the year field.
fn hash_range(def: &FieldDef) -> Option<(u32, u32)> {
    match def.name {
        n if n == YEAR.name => None,
        n if n == DOM.name => Some((1, 28)),
        n if n == DOW.name => Some((0, 6)),
        _ => Some((def.min, def.max)),
    }
}

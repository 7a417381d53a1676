//! Parsing of one cron field into a bitset plus its `L`/`W`/`#` items.
//!
//! The accepted syntax and the quirks follow cronsim's `Field.parse` so that
//! both accept the same expressions where their grammars overlap:
//! `*/n` takes every n-th value of the field's full range (for day-of-week
//! that range is 0-7, so `*/2` is SUN,TUE,THU,SAT), `a/n` runs from `a` to the
//! field's maximum, a range whose ends are equal is that one value whatever its
//! step (`5-5/2` is `5`, cronsim 2.9 and Debian cron; cronsim 2.8 read it as
//! `5/2`), names are exactly the three-letter English ones.
//! Extensions over cronsim: `?` (whole day-of-month or day-of-week field, same
//! as `*`), `NW` in day-of-month, `FRIL` (a name before `L`), the year field.

use super::ScheduleError;

/// The static description of one field.
pub(crate) struct FieldDef {
    pub name: &'static str,
    pub min: u32,
    pub max: u32,
    names: &'static [&'static str],
    /// Value of `names[0]`.
    name_base: u32,
    /// Hint listing what is accepted, for error messages.
    accepts: &'static str,
}

const MONTHS: &[&str] = &["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const DAYS: &[&str] = &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

const fn def(name: &'static str, min: u32, max: u32, accepts: &'static str) -> FieldDef {
    FieldDef { name, min, max, names: &[], name_base: 0, accepts }
}

pub(crate) const SECOND: FieldDef = def("second", 0, 59, "0-59");
pub(crate) const MINUTE: FieldDef = def("minute", 0, 59, "0-59");
pub(crate) const HOUR: FieldDef = def("hour", 0, 23, "0-23");
pub(crate) const DOM: FieldDef = def("day-of-month", 1, 31, "1-31, L, LW or NW");
pub(crate) const MONTH: FieldDef =
    FieldDef { name: "month", min: 1, max: 12, names: MONTHS, name_base: 1, accepts: "1-12 or JAN-DEC" };
pub(crate) const DOW: FieldDef = FieldDef {
    name: "day-of-week",
    min: 0,
    max: 7,
    names: DAYS,
    name_base: 0,
    accepts: "0-7 (0 and 7 are Sunday), SUN-SAT, NL or N#n",
};
pub(crate) const YEAR: FieldDef = def("year", 1970, 2199, "1970-2199");

/// One parsed field. Bit `v - def.min` of `bits` is set for each plain value `v`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Parsed {
    pub bits: [u64; 4],
    /// Day-of-month `L`.
    pub last: bool,
    /// Day-of-month `LW`.
    pub last_weekday: bool,
    /// Day-of-month `NW`: bit N.
    pub weekday_near: u32,
    /// Day-of-week `NL`: bit N (0 = Sunday).
    pub dow_last: u8,
    /// Day-of-week `N#n`: bit `(n - 1) * 7 + N`.
    pub dow_nth: u64,
}

impl Parsed {
    fn set(&mut self, i: u32) {
        self.bits[(i / 64) as usize] |= 1 << (i % 64);
    }
    /// The plain values as one word (fields with at most 64 values).
    pub fn word(&self) -> u64 {
        self.bits[0]
    }
}

/// One field's text as its parsers read it (here and `H` items in `hashed.rs`).
pub(crate) struct Ctx<'a> {
    pub def: &'a FieldDef,
    pub text: &'a str,
    /// `text` ASCII-uppercased: same byte offsets.
    pub upper: &'a str,
}

impl Ctx<'_> {
    pub fn err(&self, msg: String) -> ScheduleError {
        ScheduleError { field: self.def.name, reason: format!("{:?}: {msg}", self.text) }
    }

    /// The user's spelling of a slice of `upper`.
    pub fn orig<'s>(&'s self, s: &'s str) -> &'s str {
        let start = (s.as_ptr() as usize).wrapping_sub(self.upper.as_ptr() as usize);
        self.text.get(start..start.wrapping_add(s.len())).unwrap_or(s)
    }

    /// `"<term>: "` when the term is not the whole field, else nothing.
    pub fn at(&self, term: &str) -> String {
        if term.len() == self.text.len() { String::new() } else { format!("{}: ", self.orig(term)) }
    }

    /// A single value: digits or (in month / day-of-week) a name.
    fn value(&self, s: &str) -> Result<u32, ScheduleError> {
        if let Some(i) = self.def.names.iter().position(|n| *n == s) {
            return Ok(self.def.name_base + i as u32);
        }
        if s.is_empty() {
            return Err(self.err(format!("missing value; use {}", self.def.accepts)));
        }
        if !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.err(format!("{:?} is not a valid value; use {}", self.orig(s), self.def.accepts)));
        }
        let v = s.parse::<u32>().unwrap_or(u32::MAX);
        if v < self.def.min || v > self.def.max {
            return Err(self.err(format!("{s} is out of range {}-{}", self.def.min, self.def.max)));
        }
        Ok(v)
    }

    /// A step or nth count: ASCII digits; huge values saturate.
    pub fn count(&self, s: &str, what: &str) -> Result<u64, ScheduleError> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.err(format!("{what} {s:?} is not a number")));
        }
        Ok(s.parse::<u64>().unwrap_or(u64::MAX))
    }

    pub fn range(&self, s: &str) -> Result<(u32, u32), ScheduleError> {
        let Some((a, b)) = s.split_once('-') else {
            let v = self.value(s)?;
            return Ok((v, v));
        };
        let (lo, hi) = (self.value(a)?, self.value(b)?);
        if hi < lo {
            let hint = if self.def.name == DOW.name { "; SUN is 0, write e.g. FRI-7 or FRI,SAT,SUN" } else { "" };
            let s = self.orig(s);
            return Err(self.err(format!("range {s} is reversed (end before start){hint}")));
        }
        Ok((lo, hi))
    }
}

/// Parses one field; names are matched case-insensitively.
pub(crate) fn parse(def: &FieldDef, text: &str) -> Result<Parsed, ScheduleError> {
    let upper = text.to_ascii_uppercase();
    let cx = Ctx { def, text, upper: &upper };
    let mut out = Parsed::default();
    let day_field = def.name == DOM.name || def.name == DOW.name;
    if upper == "?" && day_field {
        (def.min..=def.max).for_each(|v| out.set(v - def.min));
        return Ok(out);
    }
    for term in upper.split(',') {
        term_into(&cx, term, &mut out)?;
    }
    Ok(out)
}

fn term_into(cx: &Ctx<'_>, term: &str, out: &mut Parsed) -> Result<(), ScheduleError> {
    let def = cx.def;
    if term.is_empty() {
        return Err(cx.err("empty item in list".into()));
    }
    if term == "?" {
        return Err(cx.err("? is only allowed as the whole day-of-month or day-of-week field".into()));
    }
    if def.name == DOW.name {
        if let Some((d, n)) = term.split_once('#') {
            let d = cx.value(d)? % 7;
            let n = cx.count(n, "nth")?;
            if !(1..=5).contains(&n) {
                return Err(cx.err(format!("{}the week number after # must be 1-5", cx.at(term))));
            }
            out.dow_nth |= 1 << ((n as u32 - 1) * 7 + d);
            return Ok(());
        }
        if let Some(d) = term.strip_suffix('L') {
            out.dow_last |= 1 << (cx.value(d)? % 7);
            return Ok(());
        }
    }
    if def.name == DOM.name {
        match term {
            "L" => {
                out.last = true;
                return Ok(());
            }
            "LW" => {
                out.last_weekday = true;
                return Ok(());
            }
            _ => {}
        }
        if let Some(d) = term.strip_suffix('W') {
            if d.is_empty() || !d.bytes().all(|b| b.is_ascii_digit()) {
                return Err(cx.err(format!("{}W needs a day number before it, like 15W", cx.at(term))));
            }
            out.weekday_near |= 1 << cx.value(d)?;
            return Ok(());
        }
    }
    if term.contains('L') && (def.name == DOM.name || def.name == DOW.name) && term.contains('/') {
        return Err(cx.err(format!("{}L cannot take a step", cx.at(term))));
    }
    let (lo, hi, step) = if let Some((base, step)) = term.split_once('/') {
        let step = cx.count(step, "step")?;
        if step == 0 {
            return Err(cx.err("step must be at least 1".into()));
        }
        let (lo, hi) = if base == "*" { (def.min, def.max) } else { cx.range(base)? };
        // cronsim 2.9: a single-value base (`5/2`) runs to the field's maximum; a range
        // base whose ends are equal (`5-5/2`) is that one value, as in Debian cron
        // (cronsim 2.8 read it as `5/2`).
        if lo == hi && !base.contains('-') { (lo, def.max, step) } else { (lo, hi, step) }
    } else if term == "*" {
        (def.min, def.max, 1)
    } else {
        let (lo, hi) = cx.range(term)?;
        (lo, hi, 1)
    };
    let mut v = u64::from(lo);
    while v <= u64::from(hi) {
        let x = v as u32;
        if def.name == DOW.name {
            out.set(x % 7)
        } else {
            out.set(x - def.min)
        }
        v = v.saturating_add(step);
    }
    Ok(())
}

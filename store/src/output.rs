//! Reading a shell job's pipes as lines (see `cronrun_model::output`, re-exported here:
//! the one line cutter and tail every executor uses), and [`Mask`]: the secrets a run
//! resolved, taken out of its output lines and error text before they go anywhere.

use std::borrow::Cow;
use std::ops::Range;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::mpsc;
use tracing::warn;

pub use cronrun_model::output::*;

/// Reads `reader` line by line into `tx`, until its end or until `tx` is closed.
pub async fn read_lines<R: AsyncRead + Unpin>(reader: R, source: Source, max_len: usize, tx: mpsc::Sender<Line>) {
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    let mut lines = LineCutter::new(source, max_len);
    loop {
        let buf = match reader.fill_buf().await {
            Ok(buf) => buf,
            Err(e) => {
                warn!("reading job output: {e}");
                break;
            }
        };
        if buf.is_empty() {
            break;
        }
        let (taken, line) = lines.push(buf);
        reader.consume(taken);
        if let Some(line) = line
            && tx.send(line).await.is_err()
        {
            return;
        }
    }
    if let Some(line) = lines.finish() {
        let _ = tx.send(line).await;
    }
}

/// What a secret's value is replaced with in output and error text.
pub const MASKED: &str = "***";
/// Values shorter than this are not masked: a secret `1` or `on` would blank out every
/// digit or word it happens to match, making the output useless and telling the value
/// anyway (where the stars are). `cronrun secret set` warns of it.
pub const MIN_MASKED_BYTES: usize = 4;

/// The values of a run's secrets, found and replaced by [`MASKED`] in a line of its output
/// or its error text. A value is masked where a line holds it whole; a value of several
/// lines is masked line by line too (each line of at least [`MIN_MASKED_BYTES`]), since
/// output is cut into lines; a line cut at `max_line_bytes` that ends in the first part of
/// a value has that part masked. Not recognized: a value printed in pieces, reversed or
/// encoded (docs/security.md says so).
#[derive(Debug, Clone, Default)]
pub struct Mask {
    /// Longest first, without repeats.
    values: Vec<String>,
}

impl Mask {
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Self {
        let mut values: Vec<String> = Vec::new();
        for secret in secrets {
            let lines = secret.lines().map(|l| l.trim_end_matches('\r'));
            for value in std::iter::once(secret).chain(lines) {
                if value.len() >= MIN_MASKED_BYTES && !values.iter().any(|v| v == value) {
                    values.push(value.to_string());
                }
            }
        }
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        Self { values }
    }

    /// Whether there is nothing to mask (no secret, or only short ones).
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `text` with every value replaced by `MASKED`; borrowed when it holds none.
    pub fn apply<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut found = Vec::new();
        for value in &self.values {
            found.extend(occurrences(text, value));
        }
        found.extend(self.cut_head(text));
        if found.is_empty() {
            return Cow::Borrowed(text);
        }
        found.sort_by_key(|r| r.start);
        let mut merged: Vec<Range<usize>> = Vec::with_capacity(found.len());
        for range in found {
            match merged.last_mut() {
                // Overlapping or adjacent values are one masked stretch.
                Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
                _ => merged.push(range),
            }
        }
        let mut masked = String::with_capacity(text.len());
        let mut at = 0;
        for range in merged {
            masked.push_str(&text[at..range.start]);
            masked.push_str(MASKED);
            at = range.end;
        }
        masked.push_str(&text[at..]);
        Cow::Owned(masked)
    }

    /// In a line the cutter cut, the end of its text before the mark when it is the first
    /// part of a value (at least `MIN_MASKED_BYTES` of it): the rest of such a line is
    /// dropped, so that part is all it shows of the value.
    fn cut_head(&self, text: &str) -> Option<Range<usize>> {
        let body = text.strip_suffix(CUT_MARK)?;
        let longest = self.values.iter().map(String::len).max().unwrap_or(0);
        let from = body.len().saturating_sub(longest);
        let last = body.len().checked_sub(MIN_MASKED_BYTES)?;
        (from..=last)
            .filter(|&i| body.is_char_boundary(i))
            .find(|&i| self.values.iter().any(|v| v.len() > body.len() - i && v.starts_with(&body[i..])))
            .map(|i| i..body.len())
    }
}

/// Where `value` occurs in `text`, overlapping occurrences included.
fn occurrences<'a>(text: &'a str, value: &'a str) -> impl Iterator<Item = Range<usize>> + 'a {
    let mut from = 0;
    std::iter::from_fn(move || {
        let start = from + text.get(from..)?.find(value)?;
        // On to the next character: a value's occurrences may overlap (`abab` in `ababab`).
        from = start + text[start..].chars().next().map_or(1, char::len_utf8);
        Some(start..start + value.len())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines_of(input: &[u8], max: usize) -> Vec<String> {
        let (tx, mut rx) = mpsc::channel(100);
        read_lines(input, Source::Stdout, max, tx).await;
        let mut out = Vec::new();
        while let Some(l) = rx.recv().await {
            out.push(l.text);
        }
        out
    }

    #[tokio::test]
    async fn splits_lines_and_cuts_long_ones() {
        let cases: [(&[u8], usize, &[&str]); 4] = [
            (b"a\nbb\n\nlast", 10, &["a", "bb", "", "last"]),
            (b"0123456789abc\nx\n", 4, &["0123 [line cut]", "x"]),
            (b"", 4, &[]),
            (b"\xff\"\0\n", 8, &["\u{fffd}\"\0"]),
        ];
        for (input, max, expected) in cases {
            assert_eq!(lines_of(input, max).await, expected, "input {input:?}");
        }
    }

    /// (secrets, line, the line as masked): whole values, overlapping and adjacent ones,
    /// each line of a value of several, the head of a value at a cut, and short values
    /// left alone.
    #[test]
    fn secrets_are_masked_wherever_a_line_holds_them() {
        let pem = "-----BEGIN KEY-----\nMIIEabc123\n-----END KEY-----\n";
        let cases: [(&[&str], &str, &str); 14] = [
            (&["hunter2"], "password is hunter2!", "password is ***!"),
            (&["hunter2"], "hunter2hunter2", "***"),
            (&["hunter2"], "hunter2 and hunter2", "*** and ***"),
            (&["hunter2"], "nothing to see", "nothing to see"),
            (&["abab"], "xababab", "x***"),
            (&["hunter2", "hunter"], "hunter2 hunter", "*** ***"),
            (&["s3cr3t-v4lue"], "head s3cr3t-v4 [line cut]", "head *** [line cut]"),
            (&["s3cr3t-v4lue"], "s3c [line cut]", "s3c [line cut]"),
            (&["s3cr3t-v4lue"], "s3cr3t-v4lue [line cut]", "*** [line cut]"),
            (&[pem], "MIIEabc123", "***"),
            (&[pem], "-----END KEY-----", "***"),
            (&["abc"], "abc is too short to mask", "abc is too short to mask"),
            (&["ü-geheim"], "ein ü-geheim ü", "ein *** ü"),
            (&[], "hunter2", "hunter2"),
        ];
        for (secrets, line, masked) in cases {
            let mask = Mask::new(secrets.iter().copied());
            assert_eq!(mask.apply(line), masked, "{secrets:?} in {line:?}");
        }
        assert!(Mask::new(["abc", "1"]).is_empty(), "values under {MIN_MASKED_BYTES} bytes are not masked");
        assert!(matches!(Mask::new(["hunter2"]).apply("clean"), Cow::Borrowed(_)), "an unmasked line is not copied");
    }
}

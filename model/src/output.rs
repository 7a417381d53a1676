//! A run's output as lines, the same for every executor: bytes are cut into lines of at
//! most `max_line_bytes` (longer ones are cut and marked, the rest skipped, so memory stays
//! bounded whatever a job prints), and the last N kept for the run record. A shell job's
//! pipes feed a [`LineCutter`] in the runner (`cronrun::output::read_lines`), a guest's
//! stdout and stderr feed one inside its write calls (`cronrun_wasm`'s `stdio`).

use std::collections::VecDeque;

/// Header on stderr lines; stdout lines carry none.
pub const STREAM_HEADER: &str = "Cronrun-Stream";
/// Header of the last message of a run's log, with the final status as value.
pub const EOF_HEADER: &str = "Cronrun-Eof";
/// What a cut line ends with (the runtime's secret masking looks for it).
pub const CUT_MARK: &str = " [line cut]";

/// The lines one message of a run's live log holds. A message holds the lines of one
/// stream (stdout, or stderr with [`STREAM_HEADER`]) printed within a short window, each
/// ended by a newline; the run's end ([`EOF_HEADER`]) may carry its last lines. A runner
/// from before batching published one line per message, without its newline: such a
/// payload is that one line (an empty one too, unless it is the end).
pub fn log_lines(payload: &[u8], end: bool) -> Vec<String> {
    let text = String::from_utf8_lossy(payload);
    match text.strip_suffix('\n') {
        Some(lines) => lines.split('\n').map(str::to_string).collect(),
        None if text.is_empty() && end => Vec::new(),
        None => vec![text.into_owned()],
    }
}

/// Adds `line` to a live log message's payload (see [`log_lines`]).
pub fn push_log_line(payload: &mut String, line: &str) {
    payload.push_str(line);
    payload.push('\n');
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Stdout,
    Stderr,
}

#[derive(Debug)]
pub struct Line {
    pub source: Source,
    pub text: String,
}

/// Bytes in, complete lines out, each at most `max` bytes before its cut mark.
#[derive(Debug)]
pub struct LineCutter {
    source: Source,
    max: usize,
    /// The line being written, at most `max` bytes; `cut` once bytes past that dropped.
    partial: Vec<u8>,
    cut: bool,
}

impl LineCutter {
    pub fn new(source: Source, max: usize) -> Self {
        Self { source, max, partial: Vec::new(), cut: false }
    }

    /// Takes `bytes`, up to and including the first newline; returns how many it took and
    /// the line it completed, if it did.
    pub fn push(&mut self, bytes: &[u8]) -> (usize, Option<Line>) {
        let (chunk, ended) = match bytes.iter().position(|&b| b == b'\n') {
            Some(i) => (&bytes[..i], true),
            None => (bytes, false),
        };
        let room = self.max.saturating_sub(self.partial.len());
        self.partial.extend_from_slice(&chunk[..chunk.len().min(room)]);
        self.cut |= chunk.len() > room;
        let taken = chunk.len() + usize::from(ended);
        (taken, ended.then(|| self.complete()))
    }

    /// At the end of the stream: the last line, if it had no newline.
    pub fn finish(&mut self) -> Option<Line> {
        (!self.partial.is_empty()).then(|| self.complete())
    }

    fn complete(&mut self) -> Line {
        let mut text = String::from_utf8_lossy(&self.partial).into_owned();
        if self.cut {
            text.push_str(CUT_MARK);
        }
        self.partial.clear();
        self.cut = false;
        Line { source: self.source, text }
    }
}

/// `text` as one line of at most `max` bytes (cut at a character boundary and marked).
pub fn cut_line(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{CUT_MARK}", &text[..end])
}

/// The last `cap` lines.
#[derive(Debug)]
pub struct Tail {
    lines: VecDeque<String>,
    cap: usize,
}

impl Tail {
    pub fn new(cap: usize) -> Self {
        Self { lines: VecDeque::with_capacity(cap.min(1024)), cap }
    }
    pub fn push(&mut self, line: String) {
        if self.cap == 0 {
            return;
        }
        if self.lines.len() == self.cap {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }
    pub fn to_vec(&self) -> Vec<String> {
        self.lines.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_message_holds_its_lines_in_either_form() {
        let batch = |lines: &[&str]| {
            let mut payload = String::new();
            lines.iter().for_each(|line| push_log_line(&mut payload, line));
            payload
        };
        let cases: [(&str, bool, &[&str]); 8] = [
            (&batch(&["a", "", "b c"]), false, &["a", "", "b c"]),
            (&batch(&[""]), false, &[""]),
            (&batch(&["", ""]), true, &["", ""]),
            (&batch(&["last"]), true, &["last"]),
            // The end alone, and an older runner's one line per message.
            ("", true, &[]),
            ("", false, &[""]),
            ("one line", false, &["one line"]),
            ("ends", true, &["ends"]),
        ];
        for (payload, end, lines) in cases {
            assert_eq!(log_lines(payload.as_bytes(), end), lines, "{payload:?} end {end}");
        }
    }

    #[test]
    fn a_cutter_fed_byte_by_byte_gives_the_same_lines() {
        let input = b"first\n0123456789\nlast";
        let mut cutter = LineCutter::new(Source::Stderr, 4);
        let mut lines = Vec::new();
        for byte in input.chunks(1) {
            let (taken, line) = cutter.push(byte);
            assert_eq!(taken, 1);
            lines.extend(line.map(|l| l.text));
        }
        lines.extend(cutter.finish().map(|l| l.text));
        assert_eq!(lines, ["firs [line cut]", "0123 [line cut]", "last"]);
    }

    #[test]
    fn cut_line_keeps_characters_whole() {
        assert_eq!(cut_line("short", 8), "short");
        assert_eq!(cut_line("ééé", 3), "é [line cut]");
    }

    #[test]
    fn tail_keeps_last_lines() {
        let mut t = Tail::new(2);
        for l in ["a", "b", "c"] {
            t.push(l.into());
        }
        assert_eq!(t.to_vec(), ["b", "c"]);
        let mut none = Tail::new(0);
        none.push("x".into());
        assert!(none.to_vec().is_empty());
    }
}

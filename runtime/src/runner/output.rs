//! Output of a run: lines read with a bounded buffer whatever the job prints, published
//! live to `cronrun.logs.<job>.<run-id>`, and the last N kept for the run record.

use std::collections::VecDeque;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::mpsc;
use tracing::warn;

/// Header on stderr lines; stdout lines carry none.
pub const STREAM_HEADER: &str = "Cronrun-Stream";
/// Header of the last message of a run's log, with the final status as value.
pub const EOF_HEADER: &str = "Cronrun-Eof";

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

/// Reads `reader` line by line into `tx`. A line longer than `max_len` bytes is cut and
/// marked; the rest of it is skipped, so memory stays bounded.
pub async fn read_lines<R: AsyncRead + Unpin>(reader: R, source: Source, max_len: usize, tx: mpsc::Sender<Line>) {
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    let mut line: Vec<u8> = Vec::new();
    let mut cut = false;
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
        let (chunk, end_of_line) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], true),
            None => (buf, false),
        };
        let room = max_len.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        cut |= chunk.len() > room;
        let used = chunk.len() + usize::from(end_of_line);
        reader.consume(used);
        if end_of_line && !emit(&mut line, &mut cut, source, &tx).await {
            return;
        }
    }
    if !line.is_empty() {
        emit(&mut line, &mut cut, source, &tx).await;
    }
}

async fn emit(line: &mut Vec<u8>, cut: &mut bool, source: Source, tx: &mpsc::Sender<Line>) -> bool {
    let mut text = String::from_utf8_lossy(line).into_owned();
    if *cut {
        text.push_str(" [line cut]");
    }
    line.clear();
    *cut = false;
    tx.send(Line { source, text }).await.is_ok()
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
        assert_eq!(lines_of(b"a\nbb\n\nlast", 10).await, ["a", "bb", "", "last"]);
        assert_eq!(lines_of(b"0123456789abc\nx\n", 4).await, ["0123 [line cut]", "x"]);
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

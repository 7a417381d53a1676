//! Reading a shell job's pipes as lines (see `cronrun_model::output`, re-exported here:
//! the one line cutter and tail every executor uses).

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
}

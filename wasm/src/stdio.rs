//! The guest's stdout and stderr. Bytes are split into lines inside the guest's write
//! call and handed straight to the run's output channel: no pipe and no reader task per
//! run, so a run that prints nothing pays nothing for its stdio, and a line reaches the
//! output as soon as the guest ends it. Lines are cut by the same [`LineCutter`] as a
//! shell job's pipes (`crate::output`).
//!
//! Backpressure: a line the channel has no room for waits here, and the guest may write
//! nothing more (`check-write` grants 0 bytes, `subscribe` waits) until the channel takes
//! it. If the receiver is gone, lines are dropped and the run goes on, as log lines do.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio_util::sync::PollSender;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};

use crate::output::{Line, LineCutter, Source, Tail};

/// Bytes one `check-write` permits: bounds the lines a single write can leave waiting
/// (at worst one per byte) while the channel is full.
const WRITE_PERMIT: usize = 8 * 1024;

/// One output stream (stdout or stderr) of one run. Clones share it: every stream handle
/// the guest opens writes to the same line.
#[derive(Clone)]
pub struct GuestOutput {
    output: mpsc::Sender<Line>,
    lines: Arc<Mutex<Lines>>,
}

struct Lines {
    cutter: LineCutter,
    /// Complete lines the channel had no room for, oldest first.
    waiting: VecDeque<Line>,
    /// The last lines (stderr's explain a panic).
    tail: Tail,
}

impl GuestOutput {
    /// Lines of `source` to `output`, each at most `max` bytes; the last `tail_cap` are
    /// also kept for [`Self::tail`].
    pub fn new(source: Source, max: usize, output: mpsc::Sender<Line>, tail_cap: usize) -> Self {
        let lines = Lines { cutter: LineCutter::new(source, max), waiting: VecDeque::new(), tail: Tail::new(tail_cap) };
        Self { output, lines: Arc::new(Mutex::new(lines)) }
    }

    /// The state stays consistent at every step, so a panic elsewhere cannot spoil it.
    fn lock(&self) -> MutexGuard<'_, Lines> {
        self.lines.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self, bytes: &[u8]) {
        self.lock().push(bytes, &self.output);
    }

    /// What the guest may write now: nothing while lines wait for the channel.
    fn permit(&self) -> usize {
        let mut lines = self.lock();
        lines.send_waiting(&self.output);
        if lines.waiting.is_empty() { WRITE_PERMIT } else { 0 }
    }

    /// Returns once no line waits (sent, or dropped because the receiver is gone).
    async fn room(&self) {
        while !self.lock().waiting.is_empty() {
            // Reserve before taking the line, so a line is never out of both places.
            let Ok(permit) = self.output.reserve().await else {
                self.lock().waiting.clear();
                return;
            };
            if let Some(line) = self.lock().waiting.pop_front() {
                permit.send(line);
            }
        }
    }

    /// After the guest is gone: its last line without a newline, and any line still
    /// waiting, go out.
    pub async fn finish(&self) {
        self.lock().end_line(&self.output);
        self.room().await;
    }

    /// The last lines, oldest first.
    pub fn tail(&self) -> Vec<String> {
        self.lock().tail.to_vec()
    }
}

impl Lines {
    fn push(&mut self, mut bytes: &[u8], output: &mpsc::Sender<Line>) {
        while !bytes.is_empty() {
            let (taken, line) = self.cutter.push(bytes);
            if let Some(line) = line {
                self.complete(line, output);
            }
            bytes = &bytes[taken..];
        }
    }

    /// The partial line, if any, as a complete one.
    fn end_line(&mut self, output: &mpsc::Sender<Line>) {
        if let Some(line) = self.cutter.finish() {
            self.complete(line, output);
        }
    }

    fn complete(&mut self, line: Line, output: &mpsc::Sender<Line>) {
        self.tail.push(line.text.clone());
        self.waiting.push_back(line);
        self.send_waiting(output);
    }

    /// Hands waiting lines to the channel, in order, while it has room.
    fn send_waiting(&mut self, output: &mpsc::Sender<Line>) {
        while let Some(line) = self.waiting.pop_front() {
            match output.try_send(line) {
                Ok(()) => {}
                Err(TrySendError::Full(line)) => {
                    self.waiting.push_front(line);
                    return;
                }
                Err(TrySendError::Closed(_)) => {
                    self.waiting.clear();
                    return;
                }
            }
        }
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(GuestStream { out: self.clone(), budget: 0 })
    }

    /// Not used by WASI 0.2 (only `p2_stream` is); here because the trait asks for it.
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(GuestWriter { out: self.clone(), sender: PollSender::new(self.output.clone()) })
    }
}

/// A `wasi:io/streams.output-stream` the guest got from `get-stdout` or `get-stderr`.
struct GuestStream {
    out: GuestOutput,
    /// Bytes the last `check-write` permitted and not yet written.
    budget: usize,
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestStream {
    async fn ready(&mut self) {
        self.out.room().await;
    }
}

impl OutputStream for GuestStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        // The permit bounds what a guest can make the host hold; WASI makes going past
        // it the guest's error.
        self.budget = self
            .budget
            .checked_sub(bytes.len())
            .ok_or_else(|| StreamError::trap("write exceeded the permit of check-write"))?;
        self.out.write(&bytes);
        Ok(())
    }

    /// Lines leave as they end; a line without its newline yet is not complete output.
    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.budget = self.out.permit();
        Ok(self.budget)
    }
}

/// The same stream as an `AsyncWrite`, waiting for the channel when lines wait.
struct GuestWriter {
    out: GuestOutput,
    sender: PollSender<Line>,
}

impl GuestWriter {
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while self.out.permit() == 0 {
            if ready!(self.sender.poll_reserve(cx)).is_err() {
                self.out.lock().waiting.clear();
                break;
            }
            match self.out.lock().waiting.pop_front() {
                Some(line) => {
                    let _ = self.sender.send_item(line);
                }
                None => {
                    self.sender.abort_send();
                }
            }
        }
        Poll::Ready(())
    }
}

impl AsyncWrite for GuestWriter {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_room(cx));
        let n = buf.len().min(WRITE_PERMIT);
        self.out.write(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn received(rx: &mut mpsc::Receiver<Line>) -> Vec<(Source, String)> {
        let mut out = Vec::new();
        while let Ok(line) = rx.try_recv() {
            out.push((line.source, line.text));
        }
        out
    }

    #[tokio::test]
    async fn splits_lines_cuts_long_ones_and_ends_the_last() {
        let (tx, mut rx) = mpsc::channel(100);
        let out = GuestOutput::new(Source::Stderr, 4, tx, 2);
        let mut stream = out.p2_stream();
        assert_eq!(stream.check_write().ok(), Some(WRITE_PERMIT));
        stream.write(Bytes::from_static(b"a\nbb")).ok();
        stream.write(Bytes::from_static(b"b\n\n0123456789\nlast")).ok();
        out.finish().await;
        let expected = ["a", "bbb", "", "0123 [line cut]", "last"].map(|t| (Source::Stderr, t.to_string()));
        assert_eq!(received(&mut rx), expected);
        assert_eq!(out.tail(), ["0123 [line cut]", "last"]);
    }

    #[tokio::test]
    async fn a_full_channel_holds_the_guest_back_until_it_has_room() {
        let (tx, mut rx) = mpsc::channel(1);
        let out = GuestOutput::new(Source::Stdout, 80, tx, 0);
        let mut stream = out.p2_stream();
        assert!(stream.check_write().is_ok());
        stream.write(Bytes::from_static(b"one\ntwo\nthree\n")).ok();
        assert_eq!(stream.check_write().ok(), Some(0), "two lines wait");
        assert!(stream.write(Bytes::from_static(b"x")).is_err(), "no permit, no write");
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(line) = rx.recv().await {
                got.push(line.text);
            }
            got
        });
        stream.ready().await;
        assert_eq!(stream.check_write().ok(), Some(WRITE_PERMIT));
        drop(stream);
        drop(out);
        assert_eq!(reader.await.ok(), Some(vec!["one".to_string(), "two".into(), "three".into()]));
    }

    #[tokio::test]
    async fn a_gone_receiver_drops_lines_and_the_guest_goes_on() {
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        let out = GuestOutput::new(Source::Stdout, 80, tx, 0);
        let mut stream = out.p2_stream();
        for _ in 0..3 {
            assert_eq!(stream.check_write().ok(), Some(WRITE_PERMIT));
            assert!(stream.write(Bytes::from_static(b"lost\n")).is_ok());
        }
        stream.ready().await;
        out.finish().await;
    }
}

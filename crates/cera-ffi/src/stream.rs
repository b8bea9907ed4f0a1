//! Streaming to the foreign side, three ways over one mechanism:
//! - [`TextStream`]: an object whose `next()` is `suspend` in Kotlin / `async` in Swift (and
//!   `nextBlocking()` for plain threads), which the Kotlin `Flow` and Swift
//!   `AsyncThrowingStream` wrappers drain;
//! - [`TokenListener`]: a callback interface called with each piece on the caller's thread;
//! - [`spawn`]: a whole-result future for the `…Async` methods.
//!
//! The engine generates on its own thread, and the two take turns: after a piece the
//! generating thread waits until the consumer asks for the next one. On a machine whose cores
//! the engine's threads fill, a consumer thread waking beside them every token slowed decode
//! (a third runnable thread: measured in benchmarks/README.md); taking turns costs a hand-off
//! per token, and nothing is computed for a consumer that stopped reading. Stopping or
//! dropping the stream stops generation at the next token.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};

use crate::errors::{CeraError, Result, poisoned};
use crate::types::Turn;

/// Called with each piece of text as it is generated; return false to stop.
#[uniffi::export(callback_interface)]
pub trait TokenListener: Send + Sync {
    fn on_text(&self, text: String) -> bool;
}

/// How a stream ended.
#[derive(Clone)]
pub(crate) enum End {
    /// A plain generation: its finish reason (`length`, `eog`, `stop`, …).
    Finish(String),
    /// A chat turn.
    Turn(Box<Turn>),
}

struct State {
    queue: VecDeque<String>,
    end: Option<Result<End>>,
    /// The consumer is gone or asked to stop.
    closed: bool,
    /// The consumer is waiting for a piece (the generating thread may produce the next).
    wanted: bool,
    /// The error was handed out once already (later `next` calls end the stream).
    error_taken: bool,
    waker: Option<Waker>,
}

struct Pipe {
    state: Mutex<State>,
    /// Signalled when the consumer asks for a piece or closes (the producer waits on it).
    space: Condvar,
    /// Signalled when a piece or the end arrives (blocking consumers wait on it).
    ready: Condvar,
}

impl Pipe {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // a panic while holding this lock leaves only plain data behind: keep going
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands `text` to the consumer, then waits until it asks for the next piece; false when
    /// the consumer is gone.
    fn push(&self, text: &str) -> bool {
        let mut s = self.lock();
        if s.closed {
            return false;
        }
        s.queue.push_back(text.to_owned());
        s.wanted = false;
        let w = s.waker.take();
        // wake without the lock: a foreign executor may poll the stream from inside `wake`
        drop(s);
        self.ready.notify_all();
        if let Some(w) = w {
            w.wake();
        }
        let mut s = self.lock();
        while !s.wanted && !s.closed {
            s = self.space.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        !s.closed
    }

    fn finish(&self, end: Result<End>) {
        let mut s = self.lock();
        s.end = Some(end);
        let w = s.waker.take();
        drop(s);
        self.ready.notify_all();
        if let Some(w) = w {
            w.wake();
        }
    }

    /// The next piece if one is ready: `Some(Ok(Some(text)))`, the end `Some(Ok(None))`, the
    /// error once `Some(Err)`; `None`: nothing yet.
    fn take(&self, s: &mut State) -> Option<Result<Option<String>>> {
        if let Some(t) = s.queue.pop_front() {
            return Some(Ok(Some(t)));
        }
        match &s.end {
            None => {
                // the consumer waits: the generating thread's turn
                if !s.wanted {
                    s.wanted = true;
                    self.space.notify_all();
                }
                None
            }
            Some(Ok(_)) => Some(Ok(None)),
            Some(Err(e)) if !s.error_taken => {
                s.error_taken = true;
                Some(Err(e.clone()))
            }
            Some(Err(_)) => Some(Ok(None)),
        }
    }

    fn close(&self) {
        self.lock().closed = true;
        self.space.notify_all();
    }
}

/// Text pieces of a generation as they are produced. Kotlin: `suspend fun next(): String?`
/// (null at the end; wrap with `asFlow()`); Swift: `func next() async throws -> String?`.
#[derive(uniffi::Object)]
pub struct TextStream {
    pipe: Arc<Pipe>,
}

/// Starts `work` on its own thread; it calls its argument with each piece (false: stop) and
/// returns how the generation ended.
pub(crate) fn start(
    name: &str,
    work: impl FnOnce(&mut dyn FnMut(&str) -> bool) -> Result<End> + Send + 'static,
) -> Result<Arc<TextStream>> {
    let pipe = Arc::new(Pipe {
        state: Mutex::new(State {
            queue: VecDeque::new(),
            end: None,
            closed: false,
            // the first piece is asked for from the start
            wanted: true,
            error_taken: false,
            waker: None,
        }),
        space: Condvar::new(),
        ready: Condvar::new(),
    });
    let p = Arc::clone(&pipe);
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let end = work(&mut |t: &str| t.is_empty() || p.push(t));
            p.finish(end);
        })
        .map_err(|e| CeraError::Engine(format!("cannot start the generating thread: {e}")))?;
    Ok(Arc::new(TextStream { pipe }))
}

struct NextPiece {
    pipe: Arc<Pipe>,
}

impl Future for NextPiece {
    type Output = Result<Option<String>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = self.pipe.lock();
        match self.pipe.take(&mut s) {
            Some(r) => Poll::Ready(r),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

#[uniffi::export]
impl TextStream {
    /// The next piece of text; null (nil) once generation has ended. An error the generation
    /// met is thrown once, here.
    pub async fn next(&self) -> Result<Option<String>> {
        NextPiece {
            pipe: Arc::clone(&self.pipe),
        }
        .await
    }

    /// As `next`, blocking the calling thread.
    pub fn next_blocking(&self) -> Result<Option<String>> {
        let mut s = self.pipe.lock();
        loop {
            if let Some(r) = self.pipe.take(&mut s) {
                return r;
            }
            s = self.pipe.ready.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Stops generation at the next token (the pieces already produced can still be read).
    /// Destroying the stream (Kotlin `close()`/`use {}`, Swift `deinit`) stops it too.
    pub fn stop(&self) {
        self.pipe.close();
    }

    /// Why generation ended (`length`, `eog`, `stop`, …), once it has; null before.
    pub fn finish_reason(&self) -> Option<String> {
        match &self.pipe.lock().end {
            Some(Ok(End::Finish(f))) => Some(f.clone()),
            Some(Ok(End::Turn(t))) => Some(t.finish_reason.clone()),
            _ => None,
        }
    }

    /// The finished chat turn (text, tool calls, counts) of a `Chat.stream`, once it has ended.
    pub fn turn(&self) -> Option<Turn> {
        match &self.pipe.lock().end {
            Some(Ok(End::Turn(t))) => Some((**t).clone()),
            _ => None,
        }
    }
}

impl Drop for TextStream {
    fn drop(&mut self) {
        self.pipe.close();
    }
}

/// A future resolved by a blocking job on its own thread (the foreign caller's coroutine or
/// task is not blocked while the engine works).
pub(crate) async fn spawn<T: Send + 'static>(
    name: &str,
    job: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    struct Slot<T> {
        value: Option<Result<T>>,
        waker: Option<Waker>,
    }
    struct Wait<T>(Arc<Mutex<Slot<T>>>);
    impl<T> Future for Wait<T> {
        type Output = Result<T>;
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
            let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
            match s.value.take() {
                Some(v) => Poll::Ready(v),
                None => {
                    s.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        }
    }
    let slot = Arc::new(Mutex::new(Slot {
        value: None,
        waker: None,
    }));
    let s2 = Arc::clone(&slot);
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
                .unwrap_or_else(|_| Err(poisoned("job")));
            let mut s = s2.lock().unwrap_or_else(|p| p.into_inner());
            s.value = Some(r);
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        })
        .map_err(|e| CeraError::Engine(format!("cannot start a worker thread: {e}")))?;
    Wait(slot).await
}

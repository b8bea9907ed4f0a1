//! Text streamed from a generating thread to a Python iterator: the work runs on its own
//! thread (holding the session or chat) and ends with its result or error; the iterator waits
//! for pieces with the GIL released.
//!
//! The two take turns: after sending a piece the generating thread waits until the iterator
//! asks for the next one. On a machine whose cores the engine's threads fill, a Python thread
//! running beside them every token cost 4–6% of the decode speed (a third runnable thread);
//! taking turns costs a hand-off per token and nothing computes for a consumer that stopped
//! reading.

use std::sync::Mutex;
use std::sync::mpsc;

use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;

use crate::errors::{self, to_py};

enum Piece<T> {
    Text(String),
    End(T),
    Err(cera::Error),
}

/// What [`Pieces::next`] got.
pub enum Next<T> {
    Text(String),
    /// The work finished with this (the iterator then stops).
    End(T),
}

/// The receiving end of a generating thread.
pub struct Pieces<T> {
    /// The pieces, and the way to ask for the next one (None: the first, already coming).
    rx: Mutex<Option<Link<T>>>,
}

struct Link<T> {
    pieces: mpsc::Receiver<Piece<T>>,
    ask: mpsc::SyncSender<()>,
    asked: bool,
}

impl<T: Send + 'static> Pieces<T> {
    /// Runs `work` on a new thread; it gets an `emit` that sends a piece and says whether the
    /// consumer is still there.
    pub fn spawn<F>(name: &str, work: F) -> PyResult<Pieces<T>>
    where
        F: FnOnce(&mut dyn FnMut(&str) -> bool) -> cera::Result<T> + Send + 'static,
    {
        let (tx, rx) = mpsc::sync_channel::<Piece<T>>(1);
        let (ask, asked) = mpsc::sync_channel::<()>(1);
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let r = work(&mut |text: &str| {
                    // the piece, then nothing until the iterator wants the next (an iterator
                    // dropped: stop)
                    tx.send(Piece::Text(text.to_owned())).is_ok() && asked.recv().is_ok()
                });
                let _ = tx.send(match r {
                    Ok(v) => Piece::End(v),
                    Err(e) => Piece::Err(e),
                });
            })
            .map_err(|e| errors::CeraError::new_err(format!("cannot start a thread: {e}")))?;
        Ok(Pieces {
            rx: Mutex::new(Some(Link {
                pieces: rx,
                ask,
                asked: true,
            })),
        })
    }

    /// The next piece, waiting without the GIL; `StopIteration` once the end was returned.
    pub fn next(&self, py: Python<'_>) -> PyResult<Next<T>> {
        let mut guard = self.rx.lock().expect("stream lock");
        let Some(mut link) = guard.take() else {
            return Err(PyStopIteration::new_err(()));
        };
        // other Python threads run while this one waits
        let (piece, mut link) = py.detach(move || {
            if !link.asked {
                // the generating thread waits for this after each piece; gone: it ended
                let _ = link.ask.send(());
            }
            link.asked = false;
            (link.pieces.recv(), link)
        });
        match piece {
            Ok(Piece::Text(t)) => {
                link.asked = false;
                *guard = Some(link);
                Ok(Next::Text(t))
            }
            Ok(Piece::End(v)) => Ok(Next::End(v)),
            Ok(Piece::Err(e)) => Err(to_py(e)),
            Err(_) => Err(errors::CeraError::new_err(
                "the generating thread ended early",
            )),
        }
    }
}

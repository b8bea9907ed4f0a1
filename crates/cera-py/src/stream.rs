//! Text streamed from a generating thread to a Python iterator: the work runs on its own
//! thread (holding the session or chat), sends each piece through a bounded channel, and ends
//! with its result or error; the iterator waits for pieces with the GIL released.

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
    rx: Mutex<Option<mpsc::Receiver<Piece<T>>>>,
}

impl<T: Send + 'static> Pieces<T> {
    /// Runs `work` on a new thread; it gets an `emit` that sends a piece and says whether the
    /// consumer is still there.
    pub fn spawn<F>(name: &str, work: F) -> PyResult<Pieces<T>>
    where
        F: FnOnce(&mut dyn FnMut(&str) -> bool) -> cera::Result<T> + Send + 'static,
    {
        let (tx, rx) = mpsc::sync_channel::<Piece<T>>(64);
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let r = work(&mut |text: &str| tx.send(Piece::Text(text.to_owned())).is_ok());
                let _ = tx.send(match r {
                    Ok(v) => Piece::End(v),
                    Err(e) => Piece::Err(e),
                });
            })
            .map_err(|e| errors::CeraError::new_err(format!("cannot start a thread: {e}")))?;
        Ok(Pieces {
            rx: Mutex::new(Some(rx)),
        })
    }

    /// The next piece, waiting without the GIL; `StopIteration` once the end was returned.
    pub fn next(&self, py: Python<'_>) -> PyResult<Next<T>> {
        let mut guard = self.rx.lock().expect("stream lock");
        let Some(rx) = guard.take() else {
            return Err(PyStopIteration::new_err(()));
        };
        // other Python threads run while this one waits
        let (piece, rx) = py.detach(move || (rx.recv(), rx));
        match piece {
            Ok(Piece::Text(t)) => {
                *guard = Some(rx);
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

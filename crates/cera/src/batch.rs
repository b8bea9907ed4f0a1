//! Steps over several sessions at once: what a server's scheduler, a batch of embeddings or a
//! speculative verifier drives. Each session brings tokens (a prefill chunk, one decode token,
//! or drafted tokens to verify) and says which rows want logits; one forward pass reads every
//! weight once for all of them, while each session's KV cache and recurrent state stay its own.
//!
//! ```no_run
//! # use cera::engine::{Engine, EngineOptions, SessionOptions};
//! # use cera::models::Logits;
//! # fn main() -> cera::Result<()> {
//! let engine = Engine::load("model.gguf", EngineOptions::default())?;
//! let (mut a, mut b) = (engine.session(SessionOptions::default()), engine.session(SessionOptions::default()));
//! let prompt_a = engine.tokenizer().encode("The sky is", true, false);
//! let prompt_b = engine.tokenizer().encode("Rust is", true, false);
//! let mut step = engine.batch();
//! step.add(&mut a, &prompt_a, Logits::Last)?;
//! step.add(&mut b, &prompt_b, Logits::Last)?;
//! step.run()?;
//! // each session now holds its own logits, as if it had run alone
//! let (la, lb) = (a.logits().to_vec(), b.logits().to_vec());
//! # let _ = (la, lb); Ok(()) }
//! ```

use std::sync::Arc;

use crate::engine::EngineInner;
use crate::error::{Error, Result};
use crate::models::{Logits, SeqInput};
use crate::session::Session;

/// One session's part of a step.
struct Entry<'s> {
    session: &'s mut Session,
    tokens: &'s [u32],
    /// `[tokens.len(), n_embd]` input rows given for these positions instead of lookups.
    embd: Option<&'s [f32]>,
    logits: Logits,
}

/// A step being assembled: sessions of one engine with their tokens. [`Batch::run`] runs it.
pub struct Batch<'s> {
    engine: Arc<EngineInner>,
    entries: Vec<Entry<'s>>,
}

/// The logits a step produced, per entry in the order the entries were added.
#[derive(Clone, Debug, Default)]
pub struct StepLogits {
    data: Vec<f32>,
    /// per entry: (first value, rows)
    at: Vec<(usize, usize)>,
    n_vocab: usize,
}

impl StepLogits {
    /// Entry `i`'s logits rows (`n_vocab` each): none, its last token's, or every token's.
    pub fn get(&self, i: usize) -> &[f32] {
        let (start, rows) = self.at[i];
        &self.data[start..start + rows * self.n_vocab]
    }

    /// Entries in the step.
    pub fn len(&self) -> usize {
        self.at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }
}

impl<'s> Batch<'s> {
    pub(crate) fn new(engine: Arc<EngineInner>) -> Batch<'s> {
        Batch {
            engine,
            entries: Vec::new(),
        }
    }

    /// Adds `tokens` for `session`, appended after its context, with logits for the rows
    /// `logits` names. Checks, before anything runs, that the session belongs to this engine,
    /// that the tokens fit its context and are in the vocabulary. A session whose recurrent
    /// state must be rebuilt after a truncate is brought up to date here, on its own. A
    /// refused entry leaves the step as it was (other sessions can still be added and run);
    /// the refused session stays borrowed until the step is dropped.
    pub fn add(
        &mut self,
        session: &'s mut Session,
        tokens: &'s [u32],
        logits: Logits,
    ) -> Result<()> {
        if !Arc::ptr_eq(&session.engine, &self.engine) {
            return Err(Error::Model(
                "a session of another engine cannot join this step".into(),
            ));
        }
        if tokens.is_empty() {
            return Err(Error::Model(format!(
                "batch entry {} has no tokens",
                self.entries.len()
            )));
        }
        self.add_input(session, tokens, None, logits)
    }

    /// [`Batch::add`] of positions whose input rows are given (`rows`, `[n, n_embd]`: an
    /// image's or an audio clip's embeddings) and stand in the context as `ids` (see
    /// [`media_ids`](crate::session::media_ids)).
    pub fn add_embeddings(
        &mut self,
        session: &'s mut Session,
        ids: &'s [u32],
        rows: &'s [f32],
        logits: Logits,
    ) -> Result<()> {
        if !Arc::ptr_eq(&session.engine, &self.engine) {
            return Err(Error::Model(
                "a session of another engine cannot join this step".into(),
            ));
        }
        let n_embd = self.engine.model.n_embd();
        if ids.is_empty() || rows.len() != ids.len() * n_embd {
            return Err(Error::Model(format!(
                "batch entry {}: {} embedding values for {} positions of {n_embd}",
                self.entries.len(),
                rows.len(),
                ids.len()
            )));
        }
        self.add_input(session, ids, Some(rows), logits)
    }

    fn add_input(
        &mut self,
        session: &'s mut Session,
        tokens: &'s [u32],
        embd: Option<&'s [f32]>,
        logits: Logits,
    ) -> Result<()> {
        session.prepare_feed(tokens, embd)?;
        self.entries.push(Entry {
            session,
            tokens,
            embd,
            logits,
        });
        Ok(())
    }

    /// Entries so far.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Tokens in the step so far.
    pub fn n_tokens(&self) -> usize {
        self.entries.iter().map(|e| e.tokens.len()).sum()
    }

    /// Runs the step. Each session's context grows by its tokens and its
    /// [`Session::logits`] become those of its last token when it asked for them (a `None`
    /// entry has no logits until its next step). All the rows are also returned.
    pub fn run(self) -> Result<StepLogits> {
        let mut out = StepLogits {
            n_vocab: self.engine.model.n_vocab(),
            ..Default::default()
        };
        self.run_into(&mut out)?;
        Ok(out)
    }

    /// [`Batch::run`] into `out`, reusing its memory (a scheduler's steady state).
    pub fn run_into(mut self, out: &mut StepLogits) -> Result<()> {
        let engine = Arc::clone(&self.engine);
        let n_vocab = engine.model.n_vocab();
        out.n_vocab = n_vocab;
        out.at.clear();
        if self.entries.is_empty() {
            out.data.clear();
            return Ok(());
        }
        let mut ws = engine.take_workspace();
        let mut seqs: Vec<SeqInput> = self
            .entries
            .iter_mut()
            .map(|e| SeqInput {
                pos0: e.session.tokens.len(),
                tokens: e.tokens,
                embd: e.embd,
                logits: e.logits,
                state: &mut e.session.state.seq,
                lora: &e.session.lora,
            })
            .collect();
        let r = engine
            .model
            .forward_batch(&engine.dev, &mut ws, &mut seqs, &mut out.data);
        drop(seqs);
        engine.put_workspace(ws);
        r?;
        let mut at = 0;
        for e in &mut self.entries {
            let rows = match e.logits {
                Logits::None => 0,
                Logits::Last => 1,
                Logits::All => e.tokens.len(),
            };
            out.at.push((at, rows));
            let last =
                (rows > 0).then(|| &out.data[at + (rows - 1) * n_vocab..at + rows * n_vocab]);
            e.session.absorb(e.tokens, last);
            at += rows * n_vocab;
        }
        Ok(())
    }
}

impl crate::engine::Engine {
    /// A step over several sessions of this engine (see [`crate::batch`]): add each session's
    /// tokens, then run them in one forward pass.
    pub fn batch<'s>(&self) -> Batch<'s> {
        Batch::new(Arc::clone(&self.inner))
    }
}

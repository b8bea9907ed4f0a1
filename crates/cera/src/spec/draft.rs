//! A draft model: a smaller model with the target's vocabulary, decoding greedily in a session
//! of its own that follows the target's context (only the part that changed is prefilled).

use super::Drafter;
use crate::backend::argmax;
use crate::engine::{Engine, SessionOptions};
use crate::error::{Error, Result};
use crate::session::Session;

pub struct DraftModel {
    session: Session,
}

impl DraftModel {
    /// A drafter over `draft` for `target`: their vocabularies must match (same tokens in the
    /// same order, same BOS/EOS), or it is an error naming the first difference.
    pub fn new(draft: &Engine, target: &Engine, opts: SessionOptions) -> Result<DraftModel> {
        let (a, b) = (target.tokenizer(), draft.tokenizer());
        let bad = |why: String| {
            Err(Error::Model(format!(
                "the draft model {} cannot draft for {}: {why}",
                draft.path().display(),
                target.path().display()
            )))
        };
        if a.n_vocab() != b.n_vocab() {
            return bad(format!(
                "its vocabulary has {} tokens, the target's {}",
                b.n_vocab(),
                a.n_vocab()
            ));
        }
        if let Some(i) = (0..a.n_vocab() as u32).find(|&i| a.token_bytes(i) != b.token_bytes(i)) {
            return bad(format!(
                "token {i} is {:?} in the target and {:?} in the draft",
                String::from_utf8_lossy(a.token_bytes(i)),
                String::from_utf8_lossy(b.token_bytes(i))
            ));
        }
        if (a.bos(), a.eos()) != (b.bos(), b.eos()) {
            return bad(format!(
                "BOS/EOS are {:?}/{:?} in the target and {:?}/{:?} in the draft",
                a.bos(),
                a.eos(),
                b.bos(),
                b.eos()
            ));
        }
        Ok(DraftModel {
            session: draft.session(opts),
        })
    }
}

impl Drafter for DraftModel {
    fn propose(&mut self, ctx: &[u32], k: usize, out: &mut Vec<u32>) -> Result<()> {
        out.clear();
        let room = self.session.n_ctx().saturating_sub(ctx.len());
        let k = k.min(room);
        if k == 0 || ctx.is_empty() {
            return Ok(());
        }
        self.session.prefill(ctx)?;
        for i in 0..k {
            let t = argmax(self.session.logits()) as u32;
            out.push(t);
            if i + 1 < k {
                self.session.append_tokens(&[t])?;
            }
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        "draft"
    }
}

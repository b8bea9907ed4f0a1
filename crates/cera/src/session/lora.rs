//! LoRA adapters on a session: attached, rescaled and detached at run time, never merged into
//! the model (which other sessions share). The context a session holds was computed with the
//! adapters it had then, so changing them clears it: the next prompt is prefilled again under
//! the new set (a prompt shared with the old context is not reused).

use std::sync::Arc;

use super::Session;
use crate::error::{Error, Result};
use crate::lora::{LoraAdapter, LoraSet};
use crate::state::Fingerprint;

impl Session {
    /// Applies `adapter` at `scale` from the next token on (attaching one already attached
    /// sets its scale). An adapter loaded for another model is an error.
    pub fn attach_lora(&mut self, adapter: &Arc<LoraAdapter>, scale: f32) -> Result<()> {
        if adapter.model != self.engine.fingerprint() {
            return Err(Error::Lora {
                adapter: adapter.name.clone(),
                reason: "was loaded for another model".into(),
            });
        }
        if !scale.is_finite() {
            return Err(Error::Lora {
                adapter: adapter.name.clone(),
                reason: format!("scale {scale} is not a finite number"),
            });
        }
        let mut set = self.lora.clone();
        set.attach(Arc::clone(adapter), scale);
        self.replace_loras(set);
        Ok(())
    }

    /// Stops applying `adapter`; false when it was not attached.
    pub fn detach_lora(&mut self, adapter: &Arc<LoraAdapter>) -> bool {
        let mut set = self.lora.clone();
        let found = set.detach(adapter);
        if found {
            self.replace_loras(set);
        }
        found
    }

    /// Detaches every adapter.
    pub fn clear_loras(&mut self) {
        self.replace_loras(LoraSet::default());
    }

    /// The attached adapters, in the order they apply.
    pub fn loras(&self) -> &LoraSet {
        &self.lora
    }

    /// Replaces the attached adapters with `set` (an adapter loaded for another model is an
    /// error, and nothing changes then); the context is cleared when what applies changes.
    pub fn set_loras(&mut self, set: LoraSet) -> Result<()> {
        let fp = self.engine.fingerprint();
        if let Some(a) = set.attached().iter().find(|a| a.adapter.model != fp) {
            return Err(Error::Lora {
                adapter: a.adapter.name.clone(),
                reason: "was loaded for another model".into(),
            });
        }
        self.replace_loras(set);
        Ok(())
    }

    fn replace_loras(&mut self, set: LoraSet) {
        if !set.same_as(&self.lora) {
            self.truncate(0);
        }
        self.lora = set;
    }

    /// What saved state of this session is keyed by: the model's fingerprint with the
    /// attached adapters mixed in.
    pub(crate) fn state_fingerprint(&self) -> Fingerprint {
        self.engine.fingerprint().with_adapters(&self.lora)
    }
}

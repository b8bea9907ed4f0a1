//! The options every front end's `generate` takes (Python's keywords, Kotlin's and Swift's
//! `GenerateConfig`, JavaScript's object), checked once here: each front end names a bad one
//! its own way ([`BadOption::field`] is the snake_case name).

use super::GenerateOptions;
pub use crate::sample::BadOption;

/// Plain values of one generation's sampling and stopping.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct BasicOptions {
    /// 0: until EOG or the context is full.
    pub max_tokens: usize,
    /// 0 or less: greedy.
    pub temperature: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub seed: Option<u64>,
    pub stop: Vec<String>,
    pub ignore_eos: bool,
}

impl Default for BasicOptions {
    /// The sampler's defaults (llama.cpp's), 128 tokens.
    fn default() -> Self {
        let s = crate::sample::SamplerConfig::default();
        BasicOptions {
            max_tokens: 128,
            temperature: s.temperature,
            top_k: s.top_k,
            top_p: s.top_p,
            min_p: s.min_p,
            repeat_penalty: s.repeat_penalty,
            seed: None,
            stop: Vec::new(),
            ignore_eos: false,
        }
    }
}

impl BasicOptions {
    /// The generation options, or the first option out of range
    /// ([`SamplerConfig::check`](crate::sample::SamplerConfig::check)).
    pub fn to_options(&self) -> Result<GenerateOptions, BadOption> {
        let mut sampler = crate::sample::SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            ..Default::default()
        };
        if let Some(s) = self.seed {
            sampler.seed = s;
        }
        sampler.check()?;
        Ok(GenerateOptions {
            max_tokens: self.max_tokens,
            sampler,
            stop: self.stop.clone(),
            ignore_eog: self.ignore_eos,
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::BasicOptions;

    #[test]
    fn ranges_are_checked_and_named() {
        let ok = BasicOptions::default().to_options().unwrap();
        assert_eq!(ok.max_tokens, 128);
        let mut b = BasicOptions {
            top_p: 1.5,
            ..Default::default()
        };
        assert_eq!(b.to_options().unwrap_err().field, "top_p");
        b.top_p = 0.9;
        b.min_p = f32::NAN;
        assert_eq!(b.to_options().unwrap_err().field, "min_p");
        b.min_p = 0.1;
        b.repeat_penalty = 0.0;
        let e = b.to_options().unwrap_err();
        assert_eq!(e.to_string(), "repeat_penalty must be positive (got 0)");
        assert_eq!(e.camel_case(), "repeatPenalty must be positive (got 0)");
        b.repeat_penalty = 1.1;
        b.seed = Some(3);
        b.stop = vec!["x".into()];
        let o = b.to_options().unwrap();
        assert_eq!((o.sampler.seed, o.stop.len()), (3, 1));
    }
}

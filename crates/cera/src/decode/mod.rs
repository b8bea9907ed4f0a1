//! Decoding, written once: the [`Scheduler`] runs sequences (slots, each with its
//! [`Session`](crate::session::Session)) through batched forward steps, prefilling prompts in
//! chunks beside the other slots' decode tokens, sampling each slot's next token with its own
//! [`Generator`] (sampler, grammar, stop strings), drafting and verifying when a slot
//! speculates, and reporting each slot's text as [`Event`]s. Everything that generates drives
//! it: [`Session::generate`](crate::session::Session::generate) is a one-slot use, the server
//! a queue and HTTP in front of it, the bindings run several prompts at once through it.
//!
//! ```no_run
//! # use cera::engine::{Engine, EngineOptions, SessionOptions};
//! # use cera::decode::{Event, Request, Scheduler, SchedulerOptions};
//! # use cera::session::{Control, GenerateOptions};
//! # fn main() -> cera::Result<()> {
//! let engine = Engine::load("model.gguf", EngineOptions::default())?;
//! let mut sched = Scheduler::new(&engine, SchedulerOptions::default());
//! for _ in 0..2 {
//!     sched.add_slot(engine.session(SessionOptions::default()));
//! }
//! let mut opts = GenerateOptions::default();
//! opts.max_tokens = 16;
//! for p in ["The sky is", "Rust is"] {
//!     let prompt = engine.tokenizer().encode(p, true, false);
//!     sched.submit(Request::new(prompt, opts.clone()));
//! }
//! // both prompts are prefilled, then decoded, in shared steps
//! while sched.step(&mut |ev| {
//!     if let Event::Token { id, text, .. } = ev {
//!         print!("[{id}] {text}");
//!     }
//!     Control::Continue
//! }) {}
//! # Ok(()) }
//! ```

mod generator;
mod many;
mod scheduler;
mod session;
mod slot;

pub use generator::{Generator, Step, partial_match_len};
pub use many::Completion;
pub use scheduler::{
    Chunk, Draft, Event, Finished, Prompt, Removed, Request, RequestId, Scheduler,
    SchedulerOptions, SpecConfig,
};

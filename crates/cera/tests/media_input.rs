//! Sequences that take embeddings as well as tokens: a prompt's token embeddings fed as an
//! embedding chunk give the token path's logits bit for bit (alone, mixed with text, in a
//! batched step, on models with an embedding scale and with convolution state), through the
//! scheduler's chunked prompts (greedy text equal to the token prompt's; the prefix of a
//! repeated prompt reused, keyed by the media's hash), a checkpoint, and hostile input.

use std::path::PathBuf;
use std::sync::Arc;

use cera::decode::{Chunk, Event, Request, SchedulerOptions};
use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::models::Logits;
use cera::session::{Control, GenerateOptions, Session, is_media_id};

#[path = "common/arch_models.rs"]
mod arch_models;
#[path = "common/models.rs"]
mod models;

fn load(path: PathBuf) -> Engine {
    let mut o = EngineOptions::default();
    o.n_threads = Some(2);
    Engine::load(path, o).unwrap()
}

/// `name` from the architecture generator, in a file of its own.
fn tiny(name: &str, tag: &str) -> Engine {
    let dir = std::env::temp_dir().join(format!("cera-media-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.gguf"));
    let v = arch_models::variant(name);
    std::fs::write(&path, arch_models::build(&v, models::tokenizer())).unwrap();
    load(path)
}

fn session(e: &Engine) -> Session {
    let mut o = SessionOptions::default();
    o.n_ctx = 256;
    e.session(o)
}

/// Logits after `a` as tokens, `b` as its token embeddings and `c` as tokens, against all
/// three as tokens.
fn check_mixed(e: &Engine, a: &[u32], b: &[u32], c: &[u32], what: &str) {
    let mut want = session(e);
    want.append_tokens(&[a, b, c].concat()).unwrap();
    let mut got = session(e);
    if !a.is_empty() {
        got.append_tokens(a).unwrap();
    }
    let ids = got
        .append_embeddings(&e.token_embeddings(b).unwrap())
        .unwrap();
    assert_eq!(ids.len(), b.len());
    assert!(ids.iter().all(|&t| is_media_id(t)));
    if !c.is_empty() {
        got.append_tokens(c).unwrap();
    }
    assert_eq!(got.tokens().len(), a.len() + b.len() + c.len());
    let (w, g) = (want.logits(), got.logits());
    assert!(!w.is_empty());
    let same = w.iter().zip(g).all(|(x, y)| x.to_bits() == y.to_bits());
    assert!(same, "{what}: embedding input changed the logits");
}

#[test]
fn token_embeddings_give_the_token_paths_logits() {
    let e = load(models::real_model("smollm2"));
    let toks = e
        .tokenizer()
        .encode("The capital of France is", true, false);
    // the whole prompt as one embedding chunk, then text around one
    check_mixed(&e, &[], &toks, &[], "smollm2, all embeddings");
    let (a, rest) = toks.split_at(2);
    let (b, c) = rest.split_at(3);
    check_mixed(&e, a, b, c, "smollm2, mixed");
    // an embedding scale (gemma), convolution state (lfm2), quantized embeddings
    for name in ["gemma3_f32", "lfm2_350m_q4_0", "llama3_q4_0"] {
        let e = tiny(name, "logits");
        let t: Vec<u32> = (5..25).collect();
        check_mixed(&e, &t[..4], &t[4..12], &t[12..], name);
    }
}

#[test]
fn embedding_entries_join_a_batched_step() {
    let e = load(models::real_model("smollm2"));
    let p = e.tokenizer().encode("Rust is a language", true, false);
    let q = e.tokenizer().encode("The moon", true, false);
    let (mut a, mut b) = (session(&e), session(&e));
    let rows = e.token_embeddings(&q).unwrap();
    let ids = cera::session::media_ids(&rows, q.len());
    let mut step = e.batch();
    step.add(&mut a, &p, Logits::Last).unwrap();
    step.add_embeddings(&mut b, &ids, &rows, Logits::Last)
        .unwrap();
    step.run().unwrap();
    for (s, t) in [(&a, &p), (&b, &q)] {
        let mut alone = session(&e);
        alone.append_tokens(t).unwrap();
        assert!(
            alone
                .logits()
                .iter()
                .zip(s.logits())
                .all(|(x, y)| x.to_bits() == y.to_bits())
        );
    }
    // rows that are not whole, or a placeholder id through the token path
    let mut c = session(&e);
    let mut step = e.batch();
    assert!(
        step.add_embeddings(&mut c, &ids, &rows[1..], Logits::Last)
            .is_err()
    );
    let mut d = session(&e);
    let err = e.batch().add(&mut d, &ids, Logits::Last).unwrap_err();
    assert!(
        err.to_string().contains("vocabulary") || err.to_string().contains("range"),
        "{err}"
    );
}

fn generate(e: &Engine, chunks: Vec<Vec<Chunk>>) -> Vec<(String, usize)> {
    let mut o = GenerateOptions::default();
    o.max_tokens = 12;
    o.sampler.temperature = 0.0;
    let mut sched = e.scheduler(1, SessionOptions::default(), SchedulerOptions::default());
    let n = chunks.len();
    for c in chunks {
        sched.submit(Request::chunks(c, o.clone()));
    }
    let mut out = vec![(String::new(), 0); n];
    sched.run_all(&mut |ev| {
        match ev {
            Event::Token { id, text, .. } | Event::Text { id, text, .. } => {
                out[id as usize].0.push_str(&text)
            }
            Event::Done { id, finished } => out[id as usize].1 = finished.cached_tokens,
            Event::Error { error, .. } => panic!("{error}"),
            _ => {}
        }
        Control::Continue
    });
    out
}

#[test]
fn chunked_prompts_generate_as_their_tokens() {
    let e = load(models::real_model("smollm2"));
    let toks = e.tokenizer().encode(
        "My favourite colour is blue, because the sky and the sea are",
        true,
        false,
    );
    let (a, rest) = toks.split_at(3);
    let (b, c) = rest.split_at(4);
    let rows: Arc<[f32]> = e.token_embeddings(b).unwrap().into();
    let other: Arc<[f32]> = e
        .token_embeddings(&[b[1], b[0], b[3], b[2]])
        .unwrap()
        .into();
    let mixed = |rows: &Arc<[f32]>| {
        vec![
            Chunk::Tokens(a.to_vec()),
            Chunk::Embeddings(rows.clone()),
            Chunk::Tokens(c.to_vec()),
        ]
    };
    let out = generate(
        &e,
        vec![
            vec![Chunk::Tokens(toks.clone())],
            mixed(&rows),
            mixed(&rows),
            mixed(&other),
        ],
    );
    assert!(!out[0].0.is_empty());
    assert_eq!(
        out[1].0, out[0].0,
        "the chunked prompt generated another text"
    );
    // the same media again: its whole prompt is kept in the slot (keyed by the rows' hash)
    assert_eq!(out[2].1, toks.len() - 1);
    // other media: only the text before it is kept
    assert_eq!(out[3].1, a.len());
}

#[test]
fn media_survive_a_checkpoint_and_refuse_a_replay() {
    let e = load(models::real_model("smollm2"));
    let toks = e.tokenizer().encode("One two three four", true, false);
    let mut s = session(&e);
    s.append_tokens(&toks[..2]).unwrap();
    s.append_embeddings(&e.token_embeddings(&toks[2..]).unwrap())
        .unwrap();
    let bytes = s.checkpoint().unwrap();
    let mut r = session(&e);
    r.restore(&bytes).unwrap();
    assert_eq!(r.tokens(), s.tokens());
    assert_eq!(r.logits(), s.logits());
    // hostile: not whole rows, none at all
    assert!(s.append_embeddings(&[1.0, 2.0, 3.0]).is_err());
    assert!(s.append_embeddings(&[]).is_err());
    // a recurrent model cannot roll back into media it no longer has
    let l = tiny("lfm2_350m_q4_0", "replay");
    let mut s = session(&l);
    let t: Vec<u32> = (5..15).collect();
    s.append_tokens(&t[..2]).unwrap();
    s.append_embeddings(&l.token_embeddings(&t[2..]).unwrap())
        .unwrap();
    s.truncate(6);
    let err = s.append_tokens(&[7]).unwrap_err().to_string();
    assert!(err.contains("embedding input"), "{err}");
}

//! Speculative decoding is exact: with prompt lookup and with a draft model, greedy output
//! equals plain greedy decoding on every architecture's tiny parity model and on both real
//! models (the generation fixtures' prompts); sampled output equals plain sampling seed for
//! seed (the verified rows are bit-identical to single steps and the sampler draws in the same
//! order), checked as token histograms over 10,000 draws too; grammars and stop strings hold.

use std::path::PathBuf;

use cera::engine::{Engine, EngineOptions, SessionOptions};
use cera::session::{Control, GenerateOptions, Session};
use cera::spec::{DraftModel, Drafter, NgramDrafter, SpecOptions};

#[path = "common/arch_models.rs"]
mod arch_models;
#[path = "common/models.rs"]
mod models;
use models::{real_model, tokenizer};

fn engine(path: &PathBuf) -> Engine {
    let mut o = EngineOptions::default();
    o.n_threads = Some(2);
    Engine::load(path, o).unwrap()
}

fn sopts() -> SessionOptions {
    let mut o = SessionOptions::default();
    o.n_ctx = 512;
    o
}

fn prompts() -> Vec<String> {
    let p =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/generation/prompts.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn greedy(n: usize) -> GenerateOptions {
    let mut g = GenerateOptions::default();
    g.max_tokens = n;
    g.sampler.temperature = 0.0;
    g
}

fn plain(s: &Session, g: &GenerateOptions) -> (Vec<u32>, String) {
    let mut s = s.fork();
    let r = s
        .generate(g, &mut |_: u32, _: &str| Control::Continue)
        .unwrap();
    (r.tokens, r.text)
}

fn speculative(
    s: &Session,
    g: &GenerateOptions,
    d: &mut dyn Drafter,
) -> (Vec<u32>, String, cera::spec::SpecStats) {
    let mut s = s.fork();
    let mut streamed = String::new();
    let (r, st) = s
        .generate_speculative(g, &SpecOptions::default(), d, &mut |_: u32, t: &str| {
            streamed.push_str(t);
            Control::Continue
        })
        .unwrap();
    assert_eq!(streamed, r.text, "the stream and the summary differ");
    (r.tokens, r.text, st)
}

/// Repetitive prompts give prompt lookup something to find.
fn repetitive(p: &str) -> String {
    format!("{p} {p} {p}")
}

#[test]
fn greedy_equal_on_every_tiny_model() {
    let dir = std::env::temp_dir().join(format!("cera-spec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut accepted = 0;
    // the LFM2-350M-shaped ones are the tiny LFM2 ones at a larger size: left to arch_parity
    for v in arch_models::variants()
        .into_iter()
        .filter(|v| !v.name.contains("350m"))
    {
        let path = dir.join(format!("{}.gguf", v.name));
        std::fs::write(&path, arch_models::build(&v, tokenizer())).unwrap();
        let eng = engine(&path);
        for p in ["one two three one two three one two", "a b c d a b c d a b"] {
            let mut s = eng.session(sopts());
            s.append_text(&repetitive(p), false).unwrap();
            let g = greedy(24);
            let want = plain(&s, &g);
            let (t, text, st) = speculative(&s, &g, &mut NgramDrafter::new(1, 4));
            assert_eq!((t, text), want, "{}: ngram", v.name);
            accepted += st.accepted;
            // the model drafting for itself: everything is accepted
            let mut d = DraftModel::new(&eng, &eng, sopts()).unwrap();
            let (t, text, st) = speculative(&s, &g, &mut d);
            assert_eq!((t, text), want.clone(), "{}: draft model", v.name);
            assert!(st.accepted * 10 >= st.drafted * 9, "{}: {st:?}", v.name);
        }
    }
    assert!(accepted > 0, "prompt lookup never hit");
}

#[test]
fn greedy_equal_on_real_models() {
    for name in ["smollm2", "qwen2.5-coder-0.5b"] {
        let eng = engine(&real_model(name));
        let mut drafted = 0;
        for p in prompts() {
            let mut s = eng.session(sopts());
            s.append_text(&p, true).unwrap();
            let g = greedy(32);
            let want = plain(&s, &g);
            let (t, text, st) = speculative(&s, &g, &mut NgramDrafter::new(1, 4));
            assert_eq!((t, text), want, "{name}: {p:?}");
            drafted += st.drafted;
        }
        assert!(drafted > 0, "{name}: nothing drafted");
    }
    // SmolLM2 drafting for SmolLM2 (the same vocabulary): exact and mostly accepted
    let eng = engine(&real_model("smollm2"));
    let mut s = eng.session(sopts());
    s.append_text(&prompts()[0], true).unwrap();
    let mut d = DraftModel::new(&eng, &eng, sopts()).unwrap();
    let g = greedy(48);
    let want = plain(&s, &g);
    let (t, text, st) = speculative(&s, &g, &mut d);
    assert_eq!((t, text), want);
    assert!(st.acceptance() > 0.9, "{st:?}");
}

#[test]
fn a_draft_model_with_another_vocabulary_is_refused() {
    let a = engine(&real_model("smollm2"));
    let b = engine(&real_model("qwen2.5-coder-0.5b"));
    let e = DraftModel::new(&b, &a, sopts())
        .err()
        .expect("accepted")
        .to_string();
    assert!(
        e.contains("cannot draft") && e.contains("vocabulary"),
        "{e}"
    );
}

/// A drafter that always proposes the same tokens (accepted sometimes, rejected often).
struct Fixed(Vec<u32>);

impl Drafter for Fixed {
    fn propose(&mut self, _ctx: &[u32], k: usize, out: &mut Vec<u32>) -> cera::Result<()> {
        out.clear();
        out.extend(self.0.iter().take(k));
        Ok(())
    }
    fn name(&self) -> &'static str {
        "fixed"
    }
}

#[test]
fn sampling_has_the_target_distribution() {
    let dir = std::env::temp_dir().join(format!("cera-spec-sampling-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("llama_f32.gguf");
    std::fs::write(
        &path,
        arch_models::build(&arch_models::variant("llama3_f32"), tokenizer()),
    )
    .unwrap();
    let eng = engine(&path);
    let mut o = sopts();
    o.n_ctx = 32;
    let mut s = eng.session(o);
    s.append_text("The weather today is", false).unwrap();
    // the drafter proposes the greedy continuation: often right for the first token, rarely
    // for the rest under temperature 1.5
    let fixed = plain(&s, &greedy(3)).0;
    // (every draw must equal plain sampling's with its seed; the histograms then only guard
    // that the draws spread over enough tokens to exercise rejections: 3,000 do)
    let draws = 3_000;
    let mut hist_plain = std::collections::HashMap::<u32, usize>::new();
    let mut hist_spec = std::collections::HashMap::<u32, usize>::new();
    for seed in 0..draws as u64 {
        let mut g = GenerateOptions::default();
        g.max_tokens = 3;
        g.sampler.temperature = 1.5;
        g.sampler.top_k = 100;
        g.sampler.top_p = 1.0;
        g.sampler.min_p = 0.0;
        g.sampler.seed = seed;
        let (a, _) = plain(&s, &g);
        let (b, _, _) = speculative(&s, &g, &mut Fixed(fixed.clone()));
        assert_eq!(a, b, "seed {seed}");
        *hist_plain.entry(a[2]).or_default() += 1;
        *hist_spec.entry(b[2]).or_default() += 1;
    }
    // two-sample chi-square over the tokens seen at least 20 times
    let mut chi2 = 0.0;
    let mut dof = 0;
    for (t, &a) in &hist_plain {
        let b = *hist_spec.get(t).unwrap_or(&0);
        if a + b >= 20 {
            chi2 += ((a as f64 - b as f64).powi(2)) / (a + b) as f64;
            dof += 1;
        }
    }
    assert!(dof >= 5, "too few distinct tokens: {dof}");
    // far inside the 99.9% quantile of chi-square with `dof` degrees of freedom
    assert!(
        chi2 < dof as f64 + 4.0 * (2.0 * dof as f64).sqrt() + 10.0,
        "chi2 {chi2} dof {dof}"
    );
}

#[test]
fn grammar_and_stop_strings_hold() {
    let eng = engine(&real_model("smollm2"));
    let mut s = eng.session(sopts());
    s.append_text(
        "List the numbers from one to twenty: one, two, three,",
        true,
    )
    .unwrap();
    let mut g = greedy(60);
    g.stop = vec!["ten".into()];
    let want = plain(&s, &g);
    let (t, text, _) = speculative(&s, &g, &mut NgramDrafter::new(1, 4));
    assert_eq!((t, text.clone()), want);
    assert!(!text.contains("ten"));
    let mut g = greedy(60);
    g.grammar = Some(cera::grammar::GrammarConstraint::new(std::sync::Arc::new(
        cera::grammar::Grammar::parse("root ::= (\"one\" | \"two\" | \", \")+ \".\"").unwrap(),
    )));
    let want = plain(&s, &g);
    let (t, text, _) = speculative(&s, &g, &mut NgramDrafter::new(1, 4));
    assert_eq!((t, text), want);
}

#[test]
fn drafts_the_grammar_forbids_are_cut_before_verification() {
    let eng = engine(&real_model("smollm2"));
    let mut s = eng.session(sopts());
    s.append_text("Count: one, two,", true).unwrap();
    let mut g = greedy(24);
    g.grammar = Some(cera::grammar::GrammarConstraint::new(std::sync::Arc::new(
        cera::grammar::Grammar::parse("root ::= (\" one\" | \" two\" | \",\")+ \".\"").unwrap(),
    )));
    let want = plain(&s, &g);
    // " three" can never follow under this grammar: every draft is cut to nothing
    let three = eng.tokenizer().encode(" three", false, false);
    let (t, text, st) = speculative(&s, &g, &mut Fixed(three.clone()));
    assert_eq!((t, text), want);
    assert!(st.grammar_cut > 0, "{st:?}");
    assert_eq!((st.drafted, st.verify_steps), (0, 0), "{st:?}");
    // an allowed head is kept and verified, the forbidden tail cut
    let mut head = eng.tokenizer().encode(",", false, false);
    head.extend(&three);
    let (t, text, st) = speculative(&s, &g, &mut Fixed(head));
    assert_eq!((t, text), want);
    assert!(st.grammar_cut > 0 && st.drafted > 0, "{st:?}");
}

//! The `general.*` keys convert_hf_to_gguf.py derives: the model's name, basename, size label,
//! finetune and version read from its Hugging Face id (config `_name_or_path`, then the folder
//! name) by gguf-py's heuristics, the parameter-count size label, and the sampling defaults of
//! `generation_config.json`.

use fancy_regex::Regex;
use serde_json::Value as Json;

use super::Kv;
use crate::gguf::Value;

/// What a model id says about the model (gguf-py `Metadata.get_model_id_components`).
#[derive(Debug, Default, PartialEq)]
pub(super) struct IdParts {
    pub full_name: Option<String>,
    pub org: Option<String>,
    pub basename: Option<String>,
    pub finetune: Option<String>,
    pub version: Option<String>,
    pub size_label: Option<String>,
}

fn full_match(re: &str, s: &str) -> bool {
    Regex::new(&format!("(?i)^(?:{re})$"))
        .expect("a valid pattern")
        .is_match(s)
        .unwrap_or(false)
}

#[derive(Default, Clone)]
struct Tags {
    basename: bool,
    size_label: bool,
    finetune: bool,
    version: bool,
    ty: bool,
}

impl Tags {
    fn count(&self) -> usize {
        [
            self.basename,
            self.size_label,
            self.finetune,
            self.version,
            self.ty,
        ]
        .iter()
        .filter(|&&b| b)
        .count()
    }
}

pub(super) fn id_components(model_id: &str, total_params: i64) -> IdParts {
    if model_id.contains(' ') {
        return IdParts {
            full_name: Some(model_id.to_owned()),
            ..Default::default()
        };
    }
    let (mut org, full) = match model_id.split_once('/') {
        Some((o, n)) => (Some(o.to_owned()), n.to_owned()),
        None => (None, model_id.to_owned()),
    };
    if org.as_deref().is_some_and(|o| o.starts_with('.')) {
        org = None;
    }
    let mut parts: Vec<String> = full
        .split('-')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    let mut tags = vec![Tags::default(); parts.len()];
    for i in 0..parts.len() {
        let part = parts[i].clone();
        if full_match(r"(v|iter)?\d+([.]\d+)*", &part) {
            tags[i].version = true;
        } else if full_match(r"i?q\d(_\w)*|b?fp?(16|32)", &part) {
            tags[i].ty = true;
            parts[i] = part.to_uppercase();
        } else if i > 0
            && full_match(
                r"(([A]|\d+[x])?\d+([._]\d+)?[KMBT][\d]?|small|mini|medium|large|x?xl)",
                &part,
            )
        {
            let mut p: Vec<char> = part.replace('_', ".").chars().collect();
            let n = p.len();
            if p[n - 1].is_ascii_digit() && n >= 2 {
                // bloom-7b1 → 7.1B
                let (a, b) = (p[n - 2], p[n - 1]);
                p.truncate(n - 2);
                p.extend(['.', b, a]);
            }
            let n = p.len();
            if n > 1 && p[n - 2].is_ascii_digit() && "kmbt".contains(p[n - 1]) {
                p[n - 1] = p[n - 1].to_ascii_uppercase();
            }
            if total_params != 0 {
                let n = p.len();
                let head: String = p[..n - 1].iter().collect();
                if let Ok(v) = head.parse::<f64>() {
                    let scale = match " KMBT".find(p[n - 1]) {
                        Some(k) => 1000f64.powi(k as i32),
                        None => 1e-3,
                    };
                    let label = v * scale;
                    let t = total_params;
                    let far = if t < 0 {
                        label < (t.abs() / 8) as f64
                    } else {
                        (label - t as f64).abs() > (7 * t / 8) as f64
                    };
                    if far {
                        // likely a context length
                        tags[i].finetune = true;
                        p[n - 1] = p[n - 1].to_ascii_lowercase();
                    }
                }
            }
            if tags[i].count() == 0 {
                tags[i].size_label = true;
            }
            parts[i] = p.into_iter().collect();
        } else if i > 0 && full_match("chat|instruct|vision|lora", &part) {
            if total_params < 0 && part.eq_ignore_ascii_case("lora") {
                tags[i].ty = true;
            } else {
                tags[i].finetune = true;
            }
        }
    }
    let numeric_size = parts
        .iter()
        .zip(&tags)
        .any(|(p, t)| t.size_label && p.chars().any(|c| c.is_ascii_digit()));
    if numeric_size {
        for (p, t) in parts.iter().zip(tags.iter_mut()) {
            if t.size_label && p.chars().all(char::is_alphabetic) {
                t.size_label = false;
            }
        }
    }
    let mut at_start = true;
    for (p, t) in parts.iter().zip(tags.iter_mut()) {
        let alpha_start = p.chars().next().is_some_and(char::is_alphabetic);
        if at_start && ((t.count() == 0 && alpha_start) || t.version) {
            t.basename = true;
        } else {
            at_start = false;
            if t.count() == 0 {
                t.finetune = true;
            }
        }
    }
    for t in tags.iter_mut().rev() {
        if t.basename && t.count() > 1 {
            t.basename = false;
        } else {
            break;
        }
    }
    let join = |f: &dyn Fn(&Tags) -> bool| {
        let mut v: Vec<&str> = Vec::new();
        for (p, t) in parts.iter().zip(&tags) {
            if f(t) {
                v.push(p);
            }
        }
        (!v.is_empty()).then(|| v.join("-"))
    };
    let mut basename = join(&|t| t.basename);
    let size_label = {
        let mut v: Vec<&str> = Vec::new();
        for (p, t) in parts.iter().zip(&tags) {
            if t.size_label && !v.contains(&p.as_str()) {
                v.push(p);
            }
        }
        (!v.is_empty()).then(|| v.join("-"))
    };
    let finetune = join(&|t| t.finetune);
    let version = join(&|t| t.version && !t.basename);
    if size_label.is_none() && finetune.is_none() && version.is_none() {
        basename = None;
    }
    IdParts {
        full_name: Some(full),
        org,
        basename,
        finetune,
        version,
        size_label,
    }
}

/// Python's `str.title()` on one word.
fn title(w: &str) -> String {
    let mut out = String::new();
    let mut prev_cased = false;
    for c in w.chars() {
        if prev_cased {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        prev_cased = c.is_alphabetic();
    }
    out
}

/// gguf-py `Metadata.id_to_title`: words capitalized unless an acronym or a version.
pub(super) fn id_to_title(s: &str) -> String {
    s.trim()
        .replace('-', " ")
        .split_whitespace()
        .map(|w| {
            let lower = w.chars().any(char::is_lowercase) && !w.chars().any(char::is_uppercase);
            if lower && !full_match(r"v\d+(?:\.\d+)*|\d.*", w) {
                title(w)
            } else {
                w.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// gguf-py's `model_weight_count_rounded_notation`.
fn rounded(n: u64, min_digits: usize) -> String {
    let n = n as f64;
    let (x, s) = if n > 1e12 {
        (n * 1e-12, "T")
    } else if n > 1e9 {
        (n * 1e-9, "B")
    } else if n > 1e6 {
        (n * 1e-6, "M")
    } else {
        (n * 1e-3, "K")
    };
    let int = (x.round_ties_even() as i64).to_string();
    let digits = int.trim_start_matches('0').len();
    let fix = min_digits.saturating_sub(digits);
    format!("{x:.fix$}{s}")
}

/// Parameter counts of the written tensors: (total, shared, per-expert, expert count).
#[derive(Default)]
pub(super) struct ParamCount {
    pub total: u64,
    pub shared: u64,
    pub expert: u64,
    pub expert_sum: u64,
    pub expert_tensors: u64,
}

impl ParamCount {
    /// `shape` in PyTorch order.
    pub fn add(&mut self, name: &str, shape: &[u64]) {
        let size: u64 = shape.iter().product();
        if name.contains("_exps.") && shape.len() >= 3 {
            let count = shape[shape.len() - if name.contains(".bias") { 2 } else { 3 }];
            self.expert += size / count.max(1);
            self.expert_sum += count;
            self.expert_tensors += 1;
        } else {
            self.shared += size;
        }
        self.total += size;
    }

    pub fn size_label(&self) -> String {
        let count = self
            .expert_sum
            .checked_div(self.expert_tensors)
            .unwrap_or(0);
        if count > 0 {
            format!("{count}x{}", rounded(self.shared + self.expert, 2))
        } else {
            rounded(self.total, 2)
        }
    }
}

/// The `general.*` keys after `general.type`, in gguf-py's order.
pub(super) fn general(
    kv: &mut Kv,
    dir_name: &str,
    config: &serde_json::Map<String, Json>,
    gen_config: Option<&Json>,
    params: &ParamCount,
    model_id: Option<&str>,
    name_override: Option<&str>,
) {
    let total = params.total as i64;
    let mut m = IdParts::default();
    let mut fill = |p: IdParts| {
        m.full_name = m.full_name.take().or(p.full_name.map(|n| id_to_title(&n)));
        m.org = m.org.take().or(p.org.map(|o| id_to_title(&o)));
        m.basename = m.basename.take().or(p.basename);
        m.finetune = m.finetune.take().or(p.finetune);
        m.version = m.version.take().or(p.version);
        m.size_label = m.size_label.take().or(p.size_label);
    };
    if let Some(id) = model_id {
        fill(id_components(id, total));
    }
    if let Some(id) = config.get("_name_or_path").and_then(Json::as_str)
        && id.matches('/').count() <= 1
    {
        fill(id_components(id, total));
    }
    fill(id_components(dir_name, total));
    if let Some(n) = name_override {
        m.full_name = Some(n.to_owned());
    }
    if m.full_name.is_none() {
        m.full_name = Some(dir_name.to_owned());
    }
    if m.size_label.is_none() && params.total > 0 {
        m.size_label = Some(params.size_label());
    }

    if let Some(g) = gen_config {
        let int = |k: &str| {
            g.get(k)
                .and_then(Json::as_i64)
                .map(|v| Value::I32(v as i32))
        };
        let float = |k: &str| {
            g.get(k)
                .and_then(Json::as_f64)
                .map(|v| Value::F32(v as f32))
        };
        let entries = [
            (
                "sequence",
                g.get("sequence")
                    .and_then(Json::as_str)
                    .map(|s| Value::String(s.into())),
            ),
            ("top_k", int("top_k")),
            ("top_p", float("top_p")),
            ("min_p", float("min_p")),
            ("xtc_probability", float("xtc_probability")),
            ("xtc_threshold", float("xtc_threshold")),
            ("temp", float("temperature")),
            ("penalty_last_n", int("penalty_last_n")),
            (
                "penalty_repeat",
                float("penalty_repeat").or(float("repetition_penalty")),
            ),
            ("mirostat", int("mirostat")),
            ("mirostat_tau", float("mirostat_tau")),
            ("mirostat_eta", float("mirostat_eta")),
        ];
        for (k, v) in entries {
            if let Some(v) = v {
                kv.set(format!("general.sampling.{k}"), v);
            }
        }
    }
    kv.set("general.name", m.full_name.clone().unwrap_or_default());
    if let Some(v) = &m.version {
        kv.set("general.version", v.as_str());
    }
    if let Some(o) = &m.org {
        kv.set("general.organization", o.as_str());
    }
    if let Some(f) = &m.finetune {
        kv.set("general.finetune", f.as_str());
    }
    if let Some(b) = &m.basename {
        kv.set("general.basename", b.as_str());
    }
    if let Some(s) = &m.size_label {
        kv.set("general.size_label", s.as_str());
    }
}

/// gguf-py's default output file name: `Basename-Size-Finetune-Version-TYPE`.
pub(super) fn default_file_name(kv: &Kv, out_type: &str) -> String {
    let get = |k: &str| match kv.get(k) {
        Some(Value::String(s)) => Some(s.trim().replace(' ', "-")),
        _ => None,
    };
    let name = get("general.basename")
        .or_else(|| get("general.name"))
        .map(|n| n.replace('/', "-"))
        .unwrap_or_else(|| "ggml-model".into());
    let mut s = name;
    for k in ["general.size_label", "general.finetune", "general.version"] {
        if let Some(v) = get(k) {
            s.push('-');
            s.push_str(&v);
        }
    }
    format!("{s}-{}.gguf", out_type.to_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(
        id: &str,
        total: i64,
    ) -> (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ) {
        let p = id_components(id, total);
        (p.basename, p.size_label, p.finetune, p.version)
    }

    #[test]
    fn model_ids_split_as_gguf_py_splits_them() {
        let s = |x: &str| Some(x.to_owned());
        assert_eq!(
            parts("SmolLM2-135M-Instruct", 134_515_008),
            (s("SmolLM2"), s("135M"), s("Instruct"), None)
        );
        assert_eq!(
            parts("Qwen/Qwen2.5-Coder-0.5B-Instruct", 494_032_768),
            (s("Qwen2.5-Coder"), s("0.5B"), s("Instruct"), None)
        );
        // a size far from the parameter count is a context length, part of the finetune
        assert_eq!(
            parts("Mistral-7B-v0.1-32k", 7_241_732_096),
            (s("Mistral"), s("7B"), s("32k"), s("v0.1"))
        );
        assert_eq!(parts("bloom-7b1", 7_000_000_000).1, s("7.1B"));
        assert_eq!(parts("gpt2", 0), (None, None, None, None));
        assert_eq!(
            id_to_title("smollm2-135m-instruct"),
            "Smollm2 135m Instruct"
        );
        assert_eq!(
            id_to_title("Qwen2.5-Coder-0.5B-Instruct"),
            "Qwen2.5 Coder 0.5B Instruct"
        );
        assert_eq!(id_to_title("llama-v2-7b"), "Llama v2 7b");
    }

    #[test]
    fn size_labels_round_as_gguf_py_does() {
        let mut p = ParamCount::default();
        p.add("w", &[134_515_008]);
        assert_eq!(p.size_label(), "135M");
        let mut p = ParamCount::default();
        p.add("w", &[494_032_768]);
        assert_eq!(p.size_label(), "494M");
        let mut p = ParamCount::default();
        p.add("w", &[1_235_814_400]);
        assert_eq!(p.size_label(), "1.2B");
        let mut p = ParamCount::default();
        p.add("w", &[6_800_000]);
        assert_eq!(p.size_label(), "6.8M");
    }
}

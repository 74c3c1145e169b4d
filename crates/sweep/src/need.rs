//! The one up-front resource estimate of running jobs ([`ropelab_io::resources`]): training
//! each job's run and measuring it as its task asks ([`crate::measure`]). Every entry point
//! that runs jobs (a sweep file with its `[measure]` table, `reproduce` and every stage of a
//! study config, and the experiment commands with their flags) reaches it, so a size knob in
//! any of them is seen before anything is written.

use std::path::Path;

use ropelab_io::resources::{bytes, Need};
use ropelab_tasks::TaskKind;
use ropelab_train::resources::kept_checkpoints;
use ropelab_train::{forward_flops, inference_need, training_need, Engine, RunConfig, EVAL_MEMORY};

use crate::measure::{MeasureOptions, LANGUAGE_REACH, OFFSET_SCALES};
use crate::spec::Job;

/// One part of a measurement: its memory and arithmetic, and what it is.
struct Part {
    memory: u64,
    flops: u64,
    what: String,
}

fn forward(config: &RunConfig, samples: usize, len: usize, what: String) -> Part {
    Part {
        memory: inference_need(&config.model, len, EVAL_MEMORY).memory_bytes(),
        flops: forward_flops(&config.model, samples, len),
        what,
    }
}

/// The parts of measuring the trained run of `config` with `options`, by task.
fn parts(config: &RunConfig, run: &Path, options: &MeasureOptions) -> (Vec<Part>, Need) {
    let m = &config.model;
    let mut parts = vec![];
    let mut disk = Need::new();
    match config.task {
        TaskKind::Number | TaskKind::Letter => {
            let len = config.layout.core_len();
            let kept = kept_checkpoints(config, 0);
            let s = &options.score;
            let score = s.need(config, run, kept);
            disk = disk.disk(run, score.disk_bytes(), "scores.jsonl");
            parts.push(Part {
                memory: score.memory_bytes(),
                flops: forward_flops(m, s.samples.saturating_add(s.eval_samples), len)
                    .saturating_mul(kept as u64),
                what: format!("scoring {kept} checkpoints on {} samples", s.samples),
            });
            let lengths = options.length.need(config);
            parts.push(Part {
                memory: lengths.memory_bytes(),
                flops: (lengths.seconds() * ropelab_io::resources::ASSUMED_FLOPS) as u64,
                what: format!("the length test at extras {:?}", options.length.extras),
            });
            parts.push(forward(
                config,
                config.data.test,
                len,
                "the test split".into(),
            ));
            let heads = bytes(&[m.n_layers, m.n_heads]) as usize;
            if let Some(n) = options.hop_samples {
                parts.push(forward(
                    config,
                    n,
                    len,
                    format!("the hop map on {n} samples"),
                ));
            }
            if let Some(n) = options.ablation_samples {
                let knockouts = heads.saturating_add(m.n_layers).saturating_add(3);
                let mut p = forward(config, n, len, format!("ablations on {n} samples"));
                p.flops = p.flops.saturating_mul(2 * knockouts as u64);
                parts.push(p);
            }
            if let Some((probes, sets)) = options.route_samples {
                parts.push(forward(
                    config,
                    probes,
                    len,
                    format!("probes on {probes} samples"),
                ));
                let mut p = forward(config, sets, len, format!("layer sets on {sets} samples"));
                p.flops = p.flops.saturating_mul(bytes(&[m.n_layers, m.n_layers]));
                parts.push(p);
            }
        }
        TaskKind::Language | TaskKind::Offset | TaskKind::Ambiguous => {
            let lengths: Vec<usize> = match (&options.lengths, config.task) {
                (Some(l), _) => l.clone(),
                (None, TaskKind::Language) => {
                    let hi = config.language.as_ref().map_or(1, |l| l.lengths[1]);
                    (1..=hi.saturating_mul(LANGUAGE_REACH)).collect()
                }
                (None, TaskKind::Offset) => {
                    let hi = config.offset.as_ref().map_or(1, |o| o.lengths[1]);
                    OFFSET_SCALES.iter().map(|s| s.saturating_mul(hi)).collect()
                }
                (None, _) => {
                    let items = config.ambiguous.as_ref().map_or(1, |a| a.items);
                    OFFSET_SCALES
                        .iter()
                        .map(|s| s.saturating_mul(items))
                        .collect()
                }
            };
            // A language string has BOS and EOS; the others are tested at their length.
            let extra = usize::from(config.task == TaskKind::Language) * 2;
            let n = options.per_length;
            for &len in &lengths {
                let mut p = forward(
                    config,
                    n,
                    len.saturating_add(extra),
                    format!("testing {n} samples at length {len}"),
                );
                if options.heads {
                    p.flops = p.flops.saturating_mul(2);
                }
                parts.push(p);
            }
        }
        TaskKind::Canonical => {
            let len = config.canonical.as_ref().map_or(1, |c| c.seq_len());
            parts.push(forward(
                config,
                options.per_length,
                len,
                format!("testing {} samples", options.per_length),
            ));
            if options.heads {
                let n = options.head_samples;
                parts.push(forward(config, n, len, format!("the head on {n} samples")));
            }
        }
    }
    (parts, disk)
}

/// Memory, disk and arithmetic of measuring the trained run of `config` in `run` with
/// `options`: memory of the largest of its measurements (they run one after another), disk
/// of its files, arithmetic of them all.
pub fn measure_need(config: &RunConfig, run: &Path, options: &MeasureOptions) -> Need {
    let (parts, mut need) = parts(config, run, options);
    if let Some(largest) = parts.iter().max_by_key(|p| p.memory) {
        need = need.memory(largest.memory, largest.what.clone());
    }
    for p in parts {
        need = need.compute(p.flops, p.what);
    }
    need
}

/// What running `jobs` in `out`, `parallel` at a time, each measured with `options`, needs:
/// memory of the largest job (its training or its measurement, whichever is larger) times the
/// jobs at once; disk of every job's run and files; the arithmetic of every job.
pub fn jobs_need(jobs: &[&Job], out: &Path, options: &MeasureOptions, parallel: usize) -> Need {
    let parallel = parallel.clamp(1, jobs.len().max(1)) as u64;
    let (mut memory, mut largest) = (0u64, String::from("nothing"));
    let (mut disk, mut flops) = (0u64, 0u64);
    for j in jobs {
        let run = out.join(&j.run);
        let train = training_need(&j.config, &run, 0, Engine::Fused);
        let measure = measure_need(&j.config, &run, options);
        for (bytes, what) in [
            (train.memory_bytes(), "training"),
            (measure.memory_bytes(), "measuring"),
        ] {
            if bytes > memory {
                (memory, largest) = (bytes, format!("{what} job {}", j.label()));
            }
        }
        disk = disk
            .saturating_add(train.disk_bytes())
            .saturating_add(measure.disk_bytes());
        let seconds = train.seconds() + measure.seconds();
        flops = flops.saturating_add((seconds * ropelab_io::resources::ASSUMED_FLOPS) as u64);
    }
    Need::new()
        .memory(
            memory.saturating_mul(parallel),
            match parallel {
                1 => format!("1 x {largest} at once"),
                // The one change that lowers it without making the work smaller (twenty-sixth
                // pass, A-U1).
                _ => format!("{parallel} x {largest} at once; --jobs 1 needs 1/{parallel} of it"),
            },
        )
        .disk(out, disk, format!("{} runs", jobs.len()))
        .compute(flops, format!("training and measuring {} runs", jobs.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ropelab_train::Preset;

    fn job(config: RunConfig) -> Job {
        Job::new(vec![("seed".into(), toml::Value::Integer(0))], config)
    }

    #[test]
    fn a_tiny_job_fits_and_absurd_measurements_do_not() {
        let out = Path::new("out");
        let tiny = job(Preset::Tiny.config(TaskKind::Number));
        let options = MeasureOptions::default();
        let need = jobs_need(&[&tiny], out, &options, 1);
        assert!(need.memory_bytes() < 256 << 20, "{need:?}");
        assert!(need.seconds() < 60.0, "{need:?}");

        // Extras of 10^8 tokens: the attention pattern alone is beyond any machine.
        let mut long = options.clone();
        long.length.extras = vec![0, 100_000_000];
        assert!(jobs_need(&[&tiny], out, &long, 1).memory_bytes() > 1 << 40);
        // 10^12 samples per length: months of arithmetic, beyond what one command may take.
        let mut offset = Preset::Tiny.config(TaskKind::Offset);
        offset.seed = 1;
        let offset = job(offset);
        let mut many = options.clone();
        many.per_length = 1_000_000_000_000;
        let seconds = jobs_need(&[&offset], out, &many, 1).seconds();
        assert!(
            seconds > 30.0 * ropelab_io::resources::TIME_LIMIT_SECONDS,
            "{seconds}"
        );
        // Two jobs at once need twice the memory of one.
        let two = jobs_need(&[&tiny, &tiny], out, &options, 2);
        assert_eq!(two.memory_bytes(), 2 * need.memory_bytes());
        assert!((two.seconds() / need.seconds() - 2.0).abs() < 1e-9);
    }
}

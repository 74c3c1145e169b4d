//! `ropelab attention`: every head's attention on one test input of a run, for the report's
//! attention viewer (`attention/step-S-sample-I.json` in the run directory).

use std::path::PathBuf;

use anyhow::Result;
use candle_core::Device;
use clap::Args;
use ropelab_analysis::lens::attention::{attention_view, write_view};
use ropelab_io::{Align::Left, Align::Right, Table};
use ropelab_train::{inference_need, RunDir};

use super::Guard;

/// Arguments of `ropelab attention`.
#[derive(Debug, Args)]
pub struct AttentionArgs {
    /// Run directory written by `ropelab train`.
    #[arg(long)]
    pub run: PathBuf,
    /// Checkpoint step (default: the latest).
    #[arg(long)]
    pub step: Option<usize>,
    /// Index of the input in the run's test split.
    #[arg(long, default_value_t = 0)]
    pub sample: usize,
}

/// Runs `ropelab attention`.
pub fn run(args: AttentionArgs, guard: Guard) -> Result<()> {
    if let Ok((_, config)) = RunDir::open(&args.run) {
        super::softmax_attention(&config, &args.run, "an attention view's weights")?;
        let need = inference_need(&config.model, config.layout.core_len(), 0);
        guard.check("attention", &need)?;
    }
    let view = attention_view(&args.run, args.step, args.sample, &Device::Cpu)?;
    let target = args.run.join("attention").join(
        ropelab_analysis::lens::attention::AttentionView::file_name(view.step, view.sample),
    );
    ropelab_io::refuse_owned(&args.run, &target, Some(&serde_json::to_vec(&view)?))?;
    let path = write_view(&args.run, &view)?;
    println!(
        "{} task, step {}, test input {} ({} hops): answer {}, model {}",
        view.task, view.step, view.sample, view.hops, view.answer, view.predicted
    );
    println!("input: {}", view.tokens.join(" "));
    let query = view.tokens.len() - 1;
    let mut table = Table::new(&[
        ("layer", Left),
        ("head", Left),
        ("top key", Right),
        ("weight", Right),
        ("s_pos", Right),
        ("s_sym", Right),
        ("type", Left),
    ]);
    for h in &view.heads {
        let row = &h.pattern[query];
        let (top, weight) = row
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or((0, 0.0), |(k, &w)| (k, w));
        table.row([
            h.layer.to_string(),
            h.head.to_string(),
            format!("{top} ({})", view.tokens[top]),
            format!("{weight:.3}"),
            format!("{:.3}", h.scores.s_pos),
            format!("{:.3}", h.scores.s_sym),
            h.kind.to_string(),
        ]);
    }
    println!("{table}");
    println!("wrote {} (ropelab report shows it)", path.display());
    Ok(())
}

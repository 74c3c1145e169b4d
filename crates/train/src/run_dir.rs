//! The run directory: `config.toml`, `metrics.jsonl`, and `checkpoints/step-NNNNNN/` holding
//! `model.safetensors` (Hugging Face GPT-J names), `config.json` (transformers), `ropelab.json`
//! (the run config), `optimizer.safetensors` and `state.json` (to resume). A checkpoint is
//! written to a temporary directory and renamed into place, so it is complete or absent.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use candle_core::Device;
use ropelab_io::Manifest;
use ropelab_model::checkpoint::{
    hf_config, load_tensors, load_weights, save_tensors, save_weights,
};
use ropelab_model::GptJ;
use serde::{Deserialize, Serialize};

use crate::data::Accuracy;
use crate::optim::AdamW;
use crate::{Result, RunConfig, TrainError};

/// What `state.json` records besides the tensors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointState {
    /// Optimizer steps done.
    pub step: usize,
    /// AdamW updates done (equals `step`).
    pub adam_updates: usize,
    /// Sum of the training losses since the last metrics line (so a resumed run logs the same
    /// averages as an uninterrupted one).
    pub pending_loss_sum: f64,
    /// Number of losses in `pending_loss_sum`.
    pub pending_loss_count: usize,
    /// The `metrics.jsonl` line written at this checkpoint's step, when one was (so a resume
    /// restores it when the file lost it, e.g. a torn last line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_line: Option<String>,
    /// The run the checkpoint belongs to ([`RunConfig::identity`] of the `config.toml` the run
    /// started with; an extended run keeps it); empty in checkpoints written before it was
    /// recorded. A checkpoint copied from another run (a longer one of the same settings
    /// included), or a run whose `config.toml` was edited, is refused by it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run: String,
    /// SHA-256 of `metrics.jsonl` through this checkpoint's step (every line up to it, as
    /// written), when recorded: a line edited, added or deleted before the checkpoint, at any
    /// step, is told by it (None in checkpoints written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_sha256: Option<String>,
}

/// The lines of training log `text` whose steps are at most `step` (complete lines, in order,
/// up to the first later, unreadable or torn one).
pub fn log_through(text: &str, step: usize) -> &str {
    let mut end = 0;
    for line in text.split_inclusive('\n') {
        let line_step = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v["step"].as_u64());
        match line_step {
            Some(s) if line.ends_with('\n') && s as usize <= step => end += line.len(),
            _ => break,
        }
    }
    &text[..end]
}

/// The files of a checkpoint folder, sealed by its manifest.
pub const CHECKPOINT_FILES: [&str; 5] = [
    "model.safetensors",
    "optimizer.safetensors",
    "config.json",
    "ropelab.json",
    "state.json",
];

/// A run directory on disk.
#[derive(Debug, Clone)]
pub struct RunDir {
    root: PathBuf,
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    ropelab_io::write_atomic(path, bytes).map_err(|e| TrainError::io(path, e))
}

impl RunDir {
    /// The run directory at `root` (nothing is touched).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `config.toml`.
    pub fn config_path(&self) -> PathBuf {
        self.root.join("config.toml")
    }

    /// `metrics.jsonl`.
    pub fn metrics_path(&self) -> PathBuf {
        self.root.join("metrics.jsonl")
    }

    /// `checkpoints/`.
    pub fn checkpoints_dir(&self) -> PathBuf {
        self.root.join("checkpoints")
    }

    /// `checkpoints/step-NNNNNN/`.
    pub fn checkpoint_dir(&self, step: usize) -> PathBuf {
        self.checkpoints_dir().join(format!("step-{step:06}"))
    }

    /// Creates a fresh run directory holding `config`; refuses one that already holds a run.
    pub fn create(root: impl Into<PathBuf>, config: &RunConfig) -> Result<Self> {
        let dir = Self::new(root);
        // An empty checkpoints/ without a config.toml is a start killed before its config
        // was written: nothing was trained, so it is started again (tenth pass, UNCLEAR-1).
        let checkpoints = fs::read_dir(dir.checkpoints_dir())
            .map(|mut entries| entries.next().is_some())
            .unwrap_or(dir.checkpoints_dir().exists());
        // A study's or sweep's directory holds a config.toml of its own: named for what it is,
        // not offered a resume (twenty-fifth pass, A-U).
        if !checkpoints && dir.root.join("plan.json").is_file() {
            return Err(TrainError::run_dir(
                &dir.root,
                "is a study's or sweep's directory (it holds plan.json, the list of its jobs), \
                 not a run: choose another --out",
            ));
        }
        if dir.config_path().exists() || checkpoints {
            return Err(TrainError::run_dir(
                &dir.root,
                "already holds a run; continue it with --resume (a run stopped before its first checkpoint starts again) or choose another --out",
            ));
        }
        fs::create_dir_all(dir.checkpoints_dir()).map_err(|e| TrainError::io(&dir.root, e))?;
        write_atomic(&dir.config_path(), config.to_toml().as_bytes())?;
        Ok(dir)
    }

    /// Opens an existing run directory and reads its config.
    pub fn open(root: impl Into<PathBuf>) -> Result<(Self, RunConfig)> {
        let dir = Self::new(root);
        if !dir.root.is_dir() {
            return Err(TrainError::run_dir(&dir.root, "no such directory"));
        }
        if !dir.config_path().is_file() {
            return Err(TrainError::run_dir(
                &dir.root,
                "has no config.toml: not a ropelab run",
            ));
        }
        // A study's or sweep's directory has a config.toml of its own (and a plan of its jobs):
        // named for what it is, not left to the run config's parse error (twenty-fourth pass).
        if !dir.checkpoints_dir().is_dir() && dir.root.join("plan.json").is_file() {
            return Err(TrainError::run_dir(
                &dir.root,
                "is a study's or sweep's directory (it holds plan.json, the list of its jobs), not \
                 a run: give one of its runs (a folder with checkpoints/, e.g. seed-S/number in a \
                 study)",
            ));
        }
        let config = RunConfig::load(&dir.config_path())?;
        Ok((dir, config))
    }

    /// Steps of the complete checkpoints, ascending.
    pub fn checkpoints(&self) -> Result<Vec<usize>> {
        let dir = self.checkpoints_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(TrainError::io(dir, e)),
        };
        let mut steps: Vec<usize> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let step = name.strip_prefix("step-")?.parse().ok()?;
                e.path().join("state.json").is_file().then_some(step)
            })
            .collect();
        steps.sort_unstable();
        Ok(steps)
    }

    /// The latest complete checkpoint, or an error saying there is none.
    pub fn latest_checkpoint(&self) -> Result<usize> {
        self.checkpoints()?
            .last()
            .copied()
            .ok_or_else(|| TrainError::run_dir(&self.root, "has no checkpoints"))
    }

    /// Checkpoint `step` when given (an error naming the steps there are when it is not one),
    /// else the latest.
    pub fn checkpoint_or_latest(&self, step: Option<usize>) -> Result<usize> {
        match step {
            None => self.latest_checkpoint(),
            Some(s) => {
                let steps = self.checkpoints()?;
                if steps.contains(&s) {
                    Ok(s)
                } else {
                    Err(TrainError::run_dir(
                        &self.root,
                        format!("has no checkpoint at step {s} (it has {steps:?})"),
                    ))
                }
            }
        }
    }

    /// Writes checkpoint `step` atomically (a previous one of the same step is replaced).
    pub fn save_checkpoint(
        &self,
        state: &CheckpointState,
        model: &GptJ,
        optimizer: &AdamW,
        config: &RunConfig,
    ) -> Result<PathBuf> {
        let step = state.step;
        let parent = self.checkpoints_dir();
        fs::create_dir_all(&parent).map_err(|e| TrainError::io(&parent, e))?;
        let tmp = ropelab_io::staging_dir_in(&parent, ".tmp-step-")
            .map_err(|e| TrainError::io(&parent, e))?;
        save_weights(model, &tmp.path().join("model.safetensors"))?;
        save_tensors(
            &optimizer.state()?,
            &tmp.path().join("optimizer.safetensors"),
        )?;
        write_atomic(
            &tmp.path().join("config.json"),
            pretty(&hf_config(&config.model)).as_bytes(),
        )?;
        write_atomic(&tmp.path().join("ropelab.json"), pretty(config).as_bytes())?;
        write_atomic(&tmp.path().join("state.json"), pretty(state).as_bytes())?;
        // The manifest is written last, inside the folder that is renamed into place whole.
        Manifest::seal(tmp.path(), &CHECKPOINT_FILES).map_err(|e| TrainError::io(tmp.path(), e))?;
        let target = self.checkpoint_dir(step);
        if target.exists() {
            let old = tempfile::Builder::new()
                .prefix(".old-step-")
                .tempdir_in(&parent)
                .map_err(|e| TrainError::io(&parent, e))?;
            fs::rename(&target, old.path().join("x")).map_err(|e| TrainError::io(&target, e))?;
        }
        tmp.persist(&target)
            .map_err(|e| TrainError::io(&target, e))?;
        Ok(target)
    }

    /// Loads the model of checkpoint `step` with `config`'s architecture, frozen for inference.
    pub fn load_model(&self, step: usize, config: &RunConfig, device: &Device) -> Result<GptJ> {
        let model = self.load_trainable(step, config, device)?.frozen();
        self.computes_numbers(&model, step, config, device)?;
        Ok(model)
    }

    /// Refuses a model whose finite weights compute no finite logits (a run diverged: its
    /// weights overflow in the forward pass before any loss showed it), so no analysis measures
    /// NaN as attention or accuracy (twenty-first pass, N1). One forward pass over a short input
    /// of the run's length.
    fn computes_numbers(
        &self,
        model: &GptJ,
        step: usize,
        config: &RunConfig,
        device: &Device,
    ) -> Result<()> {
        let len = config
            .train_seq_lens()
            .into_iter()
            .min()
            .unwrap_or(1)
            .clamp(1, 64);
        let vocab = config.model.vocab_size.max(1);
        let ids: Vec<u32> = (0..len).map(|i| (i % vocab) as u32).collect();
        let input = candle_core::Tensor::from_vec(ids, (1, len), device)?; // [1, pos]
        let logits = model.forward(&input, &mut ropelab_model::Hooks::new(), None)?; // [1, pos, out]
        let values: Vec<f32> = logits.flatten_all()?.to_vec1()?;
        if values.iter().any(|v| !v.is_finite()) {
            return Err(TrainError::run_dir(
                self.checkpoint_dir(step),
                "its weights compute no finite logits (the run diverged before this \
                 checkpoint's loss showed it): analyse an earlier checkpoint with --step, or \
                 train again with a smaller learning rate",
            ));
        }
        Ok(())
    }

    /// Loads the weights of checkpoint `step` as trainable parameters (to resume training),
    /// after checking that `config` describes the model the checkpoint holds.
    fn load_trainable(&self, step: usize, config: &RunConfig, device: &Device) -> Result<GptJ> {
        self.verify_checkpoint(
            step,
            &[
                "model.safetensors",
                "ropelab.json",
                "config.json",
                "state.json",
            ],
        )?;
        // A folder renamed or copied to another step would label its results with a step the
        // run never reached (eighth pass, K014-K016): its own record must agree.
        let state = self.checkpoint_state(step)?;
        // The setting that differs is named first; a difference only in steps (which the
        // config check leaves to extended runs) is caught by the run identity.
        self.check_checkpoint_config(step, config)?;
        self.check_hf_config(step)?;
        self.check_same_run(step, &state)?;
        let path = self.checkpoint_dir(step).join("model.safetensors");
        Ok(load_weights(config.model.clone(), &path, device)?)
    }

    /// Fails when one of `files` of checkpoint `step` does not match the checksum its manifest
    /// recorded when it was written, or has no manifest (accepted only after
    /// [`ropelab_io::allow_unsealed`], i.e. `--force`).
    pub fn verify_checkpoint(&self, step: usize, files: &[&str]) -> Result<()> {
        let dir = self.checkpoint_dir(step);
        let sealed = dir.join(ropelab_io::checksum::MANIFEST).exists();
        match Manifest::verify(&dir, files).map_err(|e| TrainError::io(&dir, e))? {
            None => Ok(()),
            Some(why) => Err(TrainError::run_dir(
                &dir,
                format!(
                    "checkpoint is {}: {why}",
                    if sealed { "corrupted" } else { "unverified" }
                ),
            )),
        }
    }

    /// The training state checkpoint `step` records (its `state.json`), refused when it records
    /// another step than its folder's (a renamed or copied folder).
    pub fn checkpoint_state(&self, step: usize) -> Result<CheckpointState> {
        let state_path = self.checkpoint_dir(step).join("state.json");
        let text = fs::read_to_string(&state_path).map_err(|e| TrainError::io(&state_path, e))?;
        let state: CheckpointState = serde_json::from_str(&text)
            .map_err(|e| TrainError::run_dir(&state_path, format!("unreadable: {e}")))?;
        if state.step != step {
            return Err(TrainError::run_dir(
                &state_path,
                format!(
                    "records step {} but sits in the folder of step {step}: the checkpoint was \
                     renamed or copied (move it back to step-{:06})",
                    state.step, state.step
                ),
            ));
        }
        Ok(state)
    }

    /// The identity of this run ([`RunConfig::identity`] of its `config.toml`).
    pub fn identity(&self) -> Result<String> {
        Ok(RunConfig::load(&self.config_path())?.identity())
    }

    /// Fails when checkpoint `step` (whose state is `state`) records another run than this
    /// one: a checkpoint copied from another run, a longer one of the same settings included,
    /// or a `config.toml` edited after training (its steps lowered, say) (ninth pass).
    fn check_same_run(&self, step: usize, state: &CheckpointState) -> Result<()> {
        if state.run.is_empty() {
            return Ok(()); // written before checkpoints named their run; its manifest vouches
        }
        let config = RunConfig::load(&self.config_path())?;
        let own = config.identity();
        if state.run == own {
            return Ok(());
        }
        // A config.toml whose steps were edited is named as that edit: no checkpoint names
        // this config.toml's run, and some checkpoint's own length gives back the run they
        // name (tenth pass, n010). A checkpoint among the run's own is a copied one.
        let steps = self.checkpoints()?;
        let copied = steps
            .iter()
            .any(|&s| self.checkpoint_state(s).is_ok_and(|st| st.run == own));
        for s in steps.into_iter().filter(|_| !copied) {
            let Ok(saved) = self.checkpoint_config(s) else {
                continue;
            };
            let mut started = config.clone();
            started.optim.steps = saved.optim.steps;
            if started.identity() == state.run {
                return Err(TrainError::run_dir(
                    &self.root,
                    format!(
                        "config.toml says optim.steps = {} but the run was started with \
                         optim.steps = {} (its checkpoints name that run): restore it (extend a \
                         run with `train --resume --steps`)",
                        config.optim.steps, saved.optim.steps
                    ),
                ));
            }
        }
        Err(TrainError::run_dir(
            self.checkpoint_dir(step),
            format!(
                "belongs to another run ({}; this run's config.toml is {own}): a checkpoint \
                 copied from another run, or a config.toml edited after training (restore it, \
                 or train into another --out)",
                state.run
            ),
        ))
    }

    /// The run config checkpoint `step` was written with (its `ropelab.json`): a checkpoint
    /// describes itself.
    pub fn checkpoint_config(&self, step: usize) -> Result<RunConfig> {
        let path = self.checkpoint_dir(step).join("ropelab.json");
        let text = fs::read_to_string(&path).map_err(|e| TrainError::io(&path, e))?;
        serde_json::from_str(&text)
            .map_err(|e| TrainError::run_dir(&path, format!("unreadable: {e}")))
    }

    /// Fails, naming the first setting and both values, when `config` (e.g. an edited
    /// config.toml) disagrees with the config checkpoint `step` was trained with in anything but
    /// its number of steps (which `--resume --steps` may extend).
    pub fn check_checkpoint_config(&self, step: usize, config: &RunConfig) -> Result<()> {
        let saved = self.checkpoint_config(step)?;
        let mut ours = config.clone();
        ours.optim.steps = saved.optim.steps;
        match ours.difference(&saved) {
            None => Ok(()),
            Some((key, run, checkpoint)) => Err(TrainError::run_dir(
                &self.root,
                format!(
                    "config.toml says {key} = {run} but checkpoint step-{step:06} was trained with {key} = {checkpoint}; restore the run's config"
                ),
            )),
        }
    }

    /// Fails when checkpoint `step`'s `config.json` (the transformers config beside the
    /// weights) is not the one its `ropelab.json` gives: the file transformers loads would
    /// describe another model than the one trained (twenty-fourth pass, S4).
    fn check_hf_config(&self, step: usize) -> Result<()> {
        let saved = self.checkpoint_config(step)?;
        let path = self.checkpoint_dir(step).join("config.json");
        let text = fs::read_to_string(&path).map_err(|e| TrainError::io(&path, e))?;
        let found: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| TrainError::run_dir(&path, format!("unreadable: {e}")))?;
        let want = hf_config(&saved.model);
        if found != want {
            let key = want
                .as_object()
                .and_then(|w| {
                    w.iter()
                        .find(|(k, v)| found.get(k.as_str()) != Some(*v))
                        .map(|(k, _)| k.clone())
                })
                .unwrap_or_else(|| "a key ropelab does not write".into());
            return Err(TrainError::run_dir(
                &path,
                format!(
                    "is not the transformers config of the model its ropelab.json describes \
                     ({key} differs): an edited or copied file"
                ),
            ));
        }
        Ok(())
    }

    /// Fails when checkpoint `step`'s training state contradicts its step: AdamW updates other
    /// than the steps done, or losses pending at a step whose metrics line was just written
    /// (every checkpoint's is: none can be), or other than one per step since the last such
    /// line (twenty-fourth pass, S4; twenty-fifth pass, A-S4).
    fn check_state(&self, step: usize, state: &CheckpointState) -> Result<()> {
        let saved = self.checkpoint_config(step)?;
        let o = &saved.optim;
        let logged = |s: usize| {
            s == 0
                || s == o.steps
                || s.is_multiple_of(o.log_every.max(1))
                || s.is_multiple_of(o.eval_every.max(1))
                || s.is_multiple_of(o.save_every.max(1))
        };
        let since = (0..step)
            .rev()
            .find(|&s| logged(s))
            .map_or(step, |s| step - s);
        let path = self.checkpoint_dir(step).join("state.json");
        let bad = |why: String| Err(TrainError::run_dir(&path, why));
        if state.adam_updates != step {
            return bad(format!(
                "records {} AdamW updates at step {step}: a checkpoint has done one per step",
                state.adam_updates
            ));
        }
        let (count, sum) = (state.pending_loss_count, state.pending_loss_sum);
        let possible = match logged(step) {
            true => count == 0 && sum == 0.0,
            false => count == since && sum.is_finite() && sum >= 0.0,
        };
        if !possible {
            return bad(format!(
                "records {count} pending losses summing to {sum} at step {step}, which no \
                 training leaves there (a metrics line is written every {} steps, at every \
                 evaluation and at every checkpoint)",
                o.log_every
            ));
        }
        Ok(())
    }

    /// Loads model and optimizer of checkpoint `step`.
    pub fn load_training_state(
        &self,
        step: usize,
        config: &RunConfig,
        device: &Device,
    ) -> Result<(GptJ, AdamW, CheckpointState)> {
        let dir = self.checkpoint_dir(step);
        self.verify_checkpoint(step, &["optimizer.safetensors", "state.json"])?;
        let model = self.load_trainable(step, config, device)?;
        // Training does not resume from weights that already diverged (twenty-third pass,
        // TRn3): its message names the checkpoint.
        self.computes_numbers(&model, step, config, device)?;
        let state = self.checkpoint_state(step)?;
        self.check_state(step, &state)?;
        let mut optimizer = AdamW::new(model.layout().params(), &config.optim);
        let tensors = load_tensors(&dir.join("optimizer.safetensors"), device)?;
        optimizer
            .restore(tensors, state.adam_updates)
            .map_err(|e| TrainError::run_dir(&dir, e))?;
        Ok((model, optimizer, state))
    }

    /// Keeps only the metrics lines of steps up to `step`, so a resumed run appends exactly
    /// what an uninterrupted one would have written: a torn last line (no newline) is dropped,
    /// and every line of `restore` (each checkpoint's own line, by step) that the kept lines
    /// lack is put back in its place (a line deleted from the middle of the log is restored
    /// where a checkpoint holds it). A complete line that is not a metrics line is an error
    /// naming the file and the line.
    ///
    /// `run` is the run its checkpoint names (empty for a checkpoint written before
    /// checkpoints named their run): every line must name it too, else the log is another
    /// run's and is refused.
    ///
    /// `digest`, the checkpoint's [`CheckpointState::log_sha256`], must be the digest of the
    /// kept lines: a line edited or deleted that no checkpoint holds is refused, not resumed.
    pub fn truncate_metrics(
        &self,
        step: usize,
        restore: &[(usize, String)],
        run: &str,
        digest: Option<&str>,
    ) -> Result<()> {
        let path = self.metrics_path();
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(TrainError::io(path, e)),
        };
        let mut kept: Vec<(usize, String)> = vec![];
        let own = run;
        let mut last: Option<usize> = None;
        for (i, line) in text.split_inclusive('\n').enumerate() {
            if !line.ends_with('\n') {
                break; // torn by a kill: rewritten below or by the resumed steps
            }
            let value = serde_json::from_str::<serde_json::Value>(line).ok();
            let line_step = value
                .as_ref()
                .and_then(|v| v["step"].as_u64())
                .ok_or_else(|| {
                    TrainError::run_dir(
                        &path,
                        format!(
                            "line {} is not a metrics line (a JSON object with a step)",
                            i + 1
                        ),
                    )
                })? as usize;
            if !own.is_empty() {
                let run = value.as_ref().and_then(|v| v["run"].as_str()).unwrap_or("");
                if run != own {
                    return Err(TrainError::run_dir(
                        &path,
                        format!(
                            "line {} was logged by {} (this run is {own}): a training log \
                             copied from another run (restore this run's own metrics.jsonl)",
                            i + 1,
                            if run.is_empty() {
                                "no run it names".to_owned()
                            } else {
                                format!("another run ({run})")
                            }
                        ),
                    ));
                }
            }
            // One line per step, in order, each the line its checkpoint recorded: a
            // concatenated or edited log is refused, not resumed (thirteenth pass, S1).
            if let Some(before) = last.filter(|&b| line_step <= b) {
                return Err(TrainError::run_dir(
                    &path,
                    format!(
                        "line {}: step {line_step} after step {before}: one line per step, in \
                         order (a concatenated or edited training log)",
                        i + 1
                    ),
                ));
            }
            last = Some(line_step);
            let recorded = restore
                .iter()
                .find(|(s, _)| *s == line_step)
                .and_then(|(_, l)| serde_json::from_str::<serde_json::Value>(l).ok());
            if recorded.is_some_and(|r| Some(&r) != value.as_ref()) {
                return Err(TrainError::run_dir(
                    &path,
                    format!(
                        "line {}: step {line_step} differs from the line its checkpoint \
                         recorded (an edited training log; restore the run's own \
                         metrics.jsonl)",
                        i + 1
                    ),
                ));
            }
            if line_step <= step {
                kept.push((line_step, line.to_owned()));
            }
        }
        for (s, line) in restore {
            if *s <= step && !kept.iter().any(|(k, _)| k == s) {
                kept.push((*s, format!("{}\n", line.trim_end_matches('\n'))));
            }
        }
        // Stable: lines of one step keep their order.
        kept.sort_by_key(|(s, _)| *s);
        let kept: String = kept.into_iter().map(|(_, l)| l).collect();
        if digest.is_some_and(|d| ropelab_io::sha256_hex(kept.as_bytes()) != d) {
            return Err(TrainError::run_dir(
                &path,
                format!(
                    "its lines through step {step} are not those checkpoint step-{step:06} \
                     recorded (a line edited, added or deleted): restore the run's own \
                     metrics.jsonl, or train anew into another --out"
                ),
            ));
        }
        if kept == text {
            return Ok(());
        }
        write_atomic(&path, kept.as_bytes())
    }

    /// Fails, naming `metrics.jsonl`, when training log `text` is not, through the run's latest
    /// checkpoint, the log that checkpoint recorded ([`CheckpointState::log_sha256`]): a line
    /// edited, added or deleted at any step up to it. A checkpoint that recorded no digest, or
    /// whose state its manifest does not vouch for, checks nothing.
    pub fn check_log(&self, text: &str) -> Result<()> {
        let Ok(step) = self.latest_checkpoint() else {
            return Ok(());
        };
        if self.verify_checkpoint(step, &["state.json"]).is_err() {
            return Ok(());
        }
        let Ok(state) = self.checkpoint_state(step) else {
            return Ok(());
        };
        match state.log_sha256 {
            Some(d) if ropelab_io::sha256_hex(log_through(text, step).as_bytes()) != d => {
                Err(TrainError::run_dir(
                    self.metrics_path(),
                    format!(
                        "its lines through step {step} are not those checkpoint step-{step:06} \
                         recorded (a line edited, added or deleted): restore the run's own \
                         metrics.jsonl"
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// The metrics line each checkpoint up to `step` recorded (by step), from its `state.json`
    /// (checked against its manifest; a checkpoint whose state cannot be vouched for gives
    /// none).
    pub fn checkpoint_metrics_lines(&self, step: usize) -> Result<Vec<(usize, String)>> {
        let mut lines = vec![];
        for s in self.checkpoints()?.into_iter().filter(|&s| s <= step) {
            if self.verify_checkpoint(s, &["state.json"]).is_err() {
                continue;
            }
            let path = self.checkpoint_dir(s).join("state.json");
            let Ok(text) = fs::read_to_string(&path) else {
                continue;
            };
            if let Ok(CheckpointState {
                metrics_line: Some(line),
                ..
            }) = serde_json::from_str::<CheckpointState>(&text)
            {
                lines.push((s, line));
            }
        }
        Ok(lines)
    }

    /// The largest step a line of `metrics.jsonl` records (None without one; lines that do
    /// not parse are skipped: this asks only whether training was logged).
    pub fn last_logged_step(&self) -> Result<Option<usize>> {
        #[derive(serde::Deserialize)]
        struct Line {
            step: usize,
        }
        let path = self.metrics_path();
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(TrainError::io(&path, e)),
        };
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str::<Line>(l).ok())
            .map(|l| l.step)
            .max())
    }

    /// The last validation recorded in `metrics.jsonl` (None when there is none).
    pub fn last_validation(&self) -> Result<Option<Accuracy>> {
        #[derive(serde::Deserialize)]
        struct Line {
            val: Option<Accuracy>,
        }
        let path = self.metrics_path();
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(TrainError::io(path, e)),
        };
        let mut last = None;
        for (i, line) in text.lines().enumerate() {
            let l: Line = serde_json::from_str(line).map_err(|e| {
                TrainError::run_dir(&path, format!("line {} is not a metrics line: {e}", i + 1))
            })?;
            if l.val.is_some() {
                last = l.val;
            }
        }
        Ok(last)
    }

    /// Deletes the saved checkpoints that `keep` does not keep (see [`crate::Retention`]).
    pub fn prune_checkpoints(&self, keep: &crate::Retention) -> Result<()> {
        if keep.keeps_all() {
            return Ok(());
        }
        let steps = self.checkpoints()?;
        for &step in &steps {
            if !keep.keeps(step, &steps) {
                // Renamed out of the checkpoint list first, so a kill during the removal
                // leaves a `.old-step-*` folder that the next writer removes, never a
                // half-deleted checkpoint.
                let dir = self.checkpoint_dir(step);
                let parent = self.checkpoints_dir();
                let doomed = tempfile::Builder::new()
                    .prefix(".old-step-")
                    .tempdir_in(&parent)
                    .map_err(|e| TrainError::io(&parent, e))?;
                fs::rename(&dir, doomed.path().join("x")).map_err(|e| TrainError::io(&dir, e))?;
                let path = doomed.path().to_owned();
                doomed.close().map_err(|e| TrainError::io(&path, e))?;
            }
        }
        Ok(())
    }

    /// Removes what a killed writer of this directory left behind: half-built checkpoint
    /// folders (`checkpoints/.tmp-step-*`, `.old-step-*`) and temporary files (`.ropelab-*`).
    /// Only called by the holder of the directory's lock, so no live writer is affected.
    pub fn remove_stale_temporaries(&self) -> Result<()> {
        for (dir, prefixes) in [
            (self.checkpoints_dir(), &[".tmp-step-", ".old-step-"][..]),
            (self.root.clone(), &[".ropelab-"][..]),
        ] {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if !prefixes.iter().any(|p| name.starts_with(p)) {
                    continue;
                }
                let path = entry.path();
                let removed = if path.is_dir() {
                    fs::remove_dir_all(&path)
                } else {
                    fs::remove_file(&path)
                };
                removed.map_err(|e| TrainError::io(&path, e))?;
            }
        }
        Ok(())
    }

    /// Empties `metrics.jsonl` (a run restarted from step 0).
    pub fn clear_metrics(&self) -> Result<()> {
        write_atomic(&self.metrics_path(), b"")
    }

    /// Appends one JSON line to `metrics.jsonl` and flushes it.
    pub fn append_metrics(&self, line: &impl Serialize) -> Result<()> {
        let path = self.metrics_path();
        let mut file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| TrainError::io(&path, e))?;
        let mut text = serde_json::to_string(line).expect("metrics serialise");
        text.push('\n');
        file.write_all(text.as_bytes())
            .map_err(|e| TrainError::io(&path, e))
    }
}

/// Pretty JSON of checkpoint metadata.
fn pretty(value: &impl Serialize) -> String {
    serde_json::to_string_pretty(value).expect("checkpoint metadata serialises")
}

/// The first key (dotted path) whose values differ between two JSON values, with both values.
pub(crate) fn first_difference(
    a: &serde_json::Value,
    b: &serde_json::Value,
    path: &str,
) -> Option<(String, String, String)> {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|k| {
                let sub = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                first_difference(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &sub,
                )
            })
        }
        _ if a == b => None,
        _ => Some((path.to_owned(), shown_value(a), shown_value(b))),
    }
}

/// A config value as a message shows it: an f32 setting (widened to f64 in JSON, e.g.
/// `0.10000000149011612`) in f32's shortest digits (`0.1`), as the config file wrote it.
fn shown_value(v: &serde_json::Value) -> String {
    match v.as_f64() {
        Some(x) if v.is_f64() && f64::from(x as f32) == x => format!("{}", x as f32),
        _ => v.to_string(),
    }
}

#[cfg(test)]
mod shown_value_tests {
    /// An f32 setting reads as written, not with its f64 widening noise (eighth pass, v006).
    #[test]
    fn f32_settings_show_as_written() {
        let a = serde_json::json!({"model": {"dropout": f64::from(0.2f32)}});
        let b = serde_json::json!({"model": {"dropout": f64::from(0.1f32)}});
        let (key, x, y) = super::first_difference(&a, &b, "").unwrap();
        assert_eq!(
            (key.as_str(), x.as_str(), y.as_str()),
            ("model.dropout", "0.2", "0.1")
        );
        let c = serde_json::json!({"lr": 0.1});
        let d = serde_json::json!({"lr": 0.3});
        assert_eq!(super::first_difference(&c, &d, "").unwrap().1, "0.1");
    }
}

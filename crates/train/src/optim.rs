//! AdamW (decoupled weight decay, PyTorch semantics) with a state that can be saved and
//! restored exactly, and the linear warm-up / linear decay schedule.

use std::collections::HashMap;

use candle_core::{backprop::GradStore, Tensor, Var};

use crate::{OptimConfig, Result, TrainError};

/// Learning rate for update number `step` (1-based): linear warm-up to `lr` over `warmup`
/// updates, then linear decay to 0 at `steps`.
pub fn lr_at(step: usize, optim: &OptimConfig) -> f64 {
    let s = step as f64;
    if step < optim.warmup {
        return optim.lr * s / optim.warmup as f64;
    }
    let remaining = optim.steps.saturating_sub(step) as f64;
    let span = optim.steps.saturating_sub(optim.warmup).max(1) as f64;
    optim.lr * (remaining / span).clamp(0.0, 1.0)
}

/// Whether a parameter is decayed: weights of Linear and embedding layers are, biases and
/// LayerNorm weights are not (the Hugging Face Trainer's convention).
pub fn decays(name: &str) -> bool {
    !(name.ends_with(".bias") || name.contains("ln_"))
}

/// AdamW moments for every parameter of a model.
#[derive(Debug)]
pub struct AdamW {
    config: OptimConfig,
    names: Vec<String>,
    m: Vec<Tensor>,
    v: Vec<Tensor>,
    t: usize,
}

impl AdamW {
    /// Zero moments for the named parameters `vars` (e.g. `GptJ::named_vars`).
    pub fn new(vars: &[(String, &Var)], config: &OptimConfig) -> Result<Self> {
        let (names, zeros): (Vec<_>, Vec<_>) = vars
            .iter()
            .map(|(n, v)| Ok((n.clone(), v.as_tensor().zeros_like()?)))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .unzip();
        Ok(Self {
            config: config.clone(),
            names,
            v: zeros.clone(),
            m: zeros,
            t: 0,
        })
    }

    /// Number of updates applied so far.
    pub fn updates(&self) -> usize {
        self.t
    }

    /// Applies one update with learning rate `lr` to `vars` (the same list as at creation).
    pub fn step(&mut self, vars: &[(String, &Var)], grads: &GradStore, lr: f64) -> Result<()> {
        self.t += 1;
        let c = &self.config;
        let bias1 = 1.0 - c.beta1.powi(self.t as i32);
        let bias2 = 1.0 - c.beta2.powi(self.t as i32);
        for (i, (name, var)) in vars.iter().enumerate() {
            let Some(g) = grads.get(var.as_tensor()) else {
                continue;
            };
            let m = (self.m[i].affine(c.beta1, 0.0)? + g.affine(1.0 - c.beta1, 0.0)?)?;
            let v = (self.v[i].affine(c.beta2, 0.0)? + g.sqr()?.affine(1.0 - c.beta2, 0.0)?)?;
            let denom = v.affine(1.0 / bias2, 0.0)?.sqrt()?.affine(1.0, c.eps)?;
            let update = m.affine(1.0 / bias1, 0.0)?.div(&denom)?;
            let decay = if decays(name) {
                lr * c.weight_decay
            } else {
                0.0
            };
            let p = var.as_tensor().affine(1.0 - decay, 0.0)?;
            var.set(&(p - update.affine(lr, 0.0)?)?)?;
            self.m[i] = m;
            self.v[i] = v;
        }
        Ok(())
    }

    /// The moments as named tensors (`m.NAME`, `v.NAME`).
    pub fn state(&self) -> HashMap<String, Tensor> {
        let mut out = HashMap::new();
        for (i, name) in self.names.iter().enumerate() {
            out.insert(format!("m.{name}"), self.m[i].clone());
            out.insert(format!("v.{name}"), self.v[i].clone());
        }
        out
    }

    /// Restores moments saved by [`AdamW::state`] after `updates` updates.
    pub fn restore(&mut self, mut state: HashMap<String, Tensor>, updates: usize) -> Result<()> {
        for (i, name) in self.names.iter().enumerate() {
            for (prefix, slot) in [("m", &mut self.m[i]), ("v", &mut self.v[i])] {
                let key = format!("{prefix}.{name}");
                let t = state
                    .remove(&key)
                    .ok_or_else(|| TrainError::Config(format!("optimizer state lacks {key}")))?;
                if t.dims() != slot.dims() {
                    return Err(TrainError::Config(format!(
                        "optimizer state {key} has shape {:?}, expected {:?}",
                        t.dims(),
                        slot.dims()
                    )));
                }
                *slot = t;
            }
        }
        self.t = updates;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Preset;
    use ropelab_tasks::TaskKind;

    #[test]
    fn schedule_warms_up_then_decays_to_zero() {
        let o = Preset::Paper.config(TaskKind::Number).optim;
        assert_eq!(lr_at(0, &o), 0.0);
        assert!((lr_at(375, &o) - 0.5e-4).abs() < 1e-12);
        assert!((lr_at(750, &o) - 1e-4).abs() < 1e-12);
        assert!((lr_at(3375, &o) - 0.5e-4).abs() < 1e-12);
        assert_eq!(lr_at(6000, &o), 0.0);
        assert_eq!(lr_at(7000, &o), 0.0);
    }

    #[test]
    fn decay_skips_biases_and_layer_norms() {
        assert!(decays("transformer.h.0.attn.q_proj.weight"));
        assert!(decays("transformer.wte.weight"));
        assert!(!decays("transformer.h.0.ln_1.weight"));
        assert!(!decays("transformer.ln_f.weight"));
        assert!(!decays("lm_head.bias"));
    }

    /// Three AdamW updates against the closed form on a scalar problem (loss = p^3).
    #[test]
    fn updates_match_the_closed_form() {
        use candle_core::Device;
        let dev = Device::Cpu;
        let mut config = Preset::Tiny.config(TaskKind::Number).optim;
        config.weight_decay = 0.1;
        let (b1, b2, eps, lr, wd) = (config.beta1, config.beta2, config.eps, 0.01, 0.1);
        for (name, decayed) in [("w.weight", true), ("w.bias", false)] {
            let x = Var::new(&[2.0f64], &dev).unwrap();
            let vars = vec![(name.to_owned(), &x)];
            let mut opt = AdamW::new(&vars, &config).unwrap();
            let (mut m, mut v, mut p) = (0.0f64, 0.0f64, 2.0f64);
            for t in 1..=3 {
                let grads = x
                    .as_tensor()
                    .powf(3.0)
                    .unwrap()
                    .sum_all()
                    .unwrap()
                    .backward()
                    .unwrap();
                opt.step(&vars, &grads, lr).unwrap();
                let g = 3.0 * p * p;
                m = b1 * m + (1.0 - b1) * g;
                v = b2 * v + (1.0 - b2) * g * g;
                let (mh, vh) = (m / (1.0 - b1.powi(t)), v / (1.0 - b2.powi(t)));
                let keep = if decayed { 1.0 - lr * wd } else { 1.0 };
                p = p * keep - lr * mh / (vh.sqrt() + eps);
                let got: Vec<f64> = x.as_tensor().to_vec1().unwrap();
                assert!(
                    (got[0] - p).abs() < 1e-12,
                    "{name} step {t}: {} vs {p}",
                    got[0]
                );
            }
            assert_eq!(opt.updates(), 3);
        }
    }
}

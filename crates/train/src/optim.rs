//! AdamW (decoupled weight decay, PyTorch semantics) with a state that can be saved and
//! restored exactly, and the linear warm-up / linear decay schedule.

use std::collections::HashMap;

use candle_core::{backprop::GradStore, Tensor, Var};
use ropelab_model::{ParamLayout, ParamSpec};

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

/// AdamW moments for every parameter of a model, kept flat in host memory so that the fused
/// kernel and the candle path share one update ([`AdamW::step_flat`], [`AdamW::step`]).
#[derive(Debug)]
pub struct AdamW {
    config: OptimConfig,
    layout: ParamLayout,
    m: Vec<f32>,
    v: Vec<f32>,
    t: usize,
}

/// The constants of one update.
#[derive(Debug, Clone, Copy)]
struct Update {
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    /// 1 / (1 - beta1^t) and 1 / sqrt(1 - beta2^t).
    inv_bias1: f32,
    inv_sqrt_bias2: f32,
}

impl Update {
    /// One fused AdamW update of `p` with gradient `g` and moments `m`, `v` (equal lengths):
    /// p <- p (1 - lr decay) - lr m_hat / (sqrt(v_hat) + eps).
    fn apply(&self, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], decay: f32) {
        let keep = 1.0 - self.lr * decay;
        let step = self.lr * self.inv_bias1;
        for (((p, g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
            *m = self.beta1 * *m + (1.0 - self.beta1) * g;
            *v = self.beta2 * *v + (1.0 - self.beta2) * g * g;
            let denom = v.sqrt() * self.inv_sqrt_bias2 + self.eps;
            *p = *p * keep - step * *m / denom;
        }
    }

    /// [`Update::apply`] split across the rayon pool in fixed chunks (element-wise, so the
    /// result does not depend on the split).
    fn apply_parallel(&self, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], decay: f32) {
        use rayon::prelude::*;
        const CHUNK: usize = 1 << 15;
        if p.len() <= CHUNK {
            return self.apply(p, g, m, v, decay);
        }
        p.par_chunks_mut(CHUNK)
            .zip(g.par_chunks(CHUNK))
            .zip(m.par_chunks_mut(CHUNK))
            .zip(v.par_chunks_mut(CHUNK))
            .for_each(|(((p, g), m), v)| self.apply(p, g, m, v, decay));
    }
}

impl AdamW {
    /// Zero moments for the parameters of `layout` (e.g. `GptJ::layout().params()`); the
    /// layout also says which parameters are decayed.
    pub fn new(layout: &ParamLayout, config: &OptimConfig) -> Self {
        Self {
            config: config.clone(),
            layout: layout.clone(),
            m: vec![0.0; layout.total()],
            v: vec![0.0; layout.total()],
            t: 0,
        }
    }

    /// Number of updates applied so far.
    pub fn updates(&self) -> usize {
        self.t
    }

    /// Counts one more update and returns its constants.
    fn next_update(&mut self, lr: f64) -> Update {
        self.t += 1;
        let c = &self.config;
        Update {
            lr: lr as f32,
            beta1: c.beta1 as f32,
            beta2: c.beta2 as f32,
            eps: c.eps as f32,
            inv_bias1: (1.0 / (1.0 - c.beta1.powi(self.t as i32))) as f32,
            inv_sqrt_bias2: (1.0 / (1.0 - c.beta2.powi(self.t as i32)).sqrt()) as f32,
        }
    }

    fn decay_of(&self, spec: &ParamSpec) -> f32 {
        if spec.decay {
            self.config.weight_decay as f32
        } else {
            0.0
        }
    }

    /// Fails unless `vars` are the layout's parameters, in its order.
    fn check_vars(&self, vars: &[(String, &Var)]) -> Result<()> {
        let specs = self.layout.specs();
        let same = vars.len() == specs.len()
            && specs
                .iter()
                .zip(vars)
                .all(|(s, (name, var))| &s.name == name && s.shape == var.dims());
        if !same {
            return Err(TrainError::Config(
                "the optimizer was built for other parameters than those it is asked to update"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Applies one update with learning rate `lr` to `vars` (f32 parameters in layout order,
    /// named as in the layout); parameters without a gradient are left alone.
    pub fn step(&mut self, vars: &[(String, &Var)], grads: &GradStore, lr: f64) -> Result<()> {
        self.check_vars(vars)?;
        let u = self.next_update(lr);
        for (spec, (_, var)) in self.layout.specs().iter().zip(vars) {
            let Some(g) = grads.get(var.as_tensor()) else {
                continue;
            };
            let g: Vec<f32> = g.flatten_all()?.to_vec1()?;
            let mut p: Vec<f32> = var.as_tensor().flatten_all()?.to_vec1()?;
            let (r, decay) = (spec.range(), self.decay_of(spec));
            u.apply_parallel(&mut p, &g, &mut self.m[r.clone()], &mut self.v[r], decay);
            var.set(&Tensor::from_vec(p, var.shape(), var.device())?)?;
        }
        Ok(())
    }

    /// Applies one update with learning rate `lr` to flat parameters (laid out by the layout
    /// given at creation, e.g. `FlatParams::values`) from flat gradients: the fused path.
    pub fn step_flat(&mut self, params: &mut [f32], grads: &[f32], lr: f64) -> Result<()> {
        if params.len() != self.m.len() || grads.len() != self.m.len() {
            return Err(TrainError::Config(format!(
                "the optimizer holds {} values, got {} parameters and {} gradients",
                self.m.len(),
                params.len(),
                grads.len()
            )));
        }
        let u = self.next_update(lr);
        for spec in self.layout.specs() {
            let (r, decay) = (spec.range(), self.decay_of(spec));
            u.apply_parallel(
                &mut params[r.clone()],
                &grads[r.clone()],
                &mut self.m[r.clone()],
                &mut self.v[r],
                decay,
            );
        }
        Ok(())
    }

    /// The moments as named tensors (`m.NAME`, `v.NAME`) on the CPU.
    pub fn state(&self) -> Result<HashMap<String, Tensor>> {
        let mut out = HashMap::new();
        for spec in self.layout.specs() {
            let (name, r, shape) = (&spec.name, spec.range(), spec.shape.as_slice());
            let cpu = &candle_core::Device::Cpu;
            out.insert(
                format!("m.{name}"),
                Tensor::from_slice(&self.m[r.clone()], shape, cpu)?,
            );
            out.insert(
                format!("v.{name}"),
                Tensor::from_slice(&self.v[r], shape, cpu)?,
            );
        }
        Ok(out)
    }

    /// Restores moments saved by [`AdamW::state`] after `updates` updates.
    pub fn restore(&mut self, mut state: HashMap<String, Tensor>, updates: usize) -> Result<()> {
        for spec in self.layout.specs() {
            let r = spec.range();
            for prefix in ["m", "v"] {
                let key = format!("{prefix}.{}", spec.name);
                let t = state
                    .remove(&key)
                    .ok_or_else(|| TrainError::Config(format!("optimizer state lacks {key}")))?;
                if t.dims() != spec.shape.as_slice() {
                    return Err(TrainError::Config(format!(
                        "optimizer state {key} has shape {:?}, expected {:?}",
                        t.dims(),
                        spec.shape
                    )));
                }
                let values: Vec<f32> = t
                    .to_dtype(candle_core::DType::F32)?
                    .flatten_all()?
                    .to_vec1()?;
                let slot = if prefix == "m" {
                    &mut self.m
                } else {
                    &mut self.v
                };
                slot[r.clone()].copy_from_slice(&values);
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

    /// Three AdamW updates against the closed form on a scalar problem (loss = p^3).
    #[test]
    fn updates_match_the_closed_form() {
        use candle_core::Device;
        let dev = Device::Cpu;
        let mut config = Preset::Tiny.config(TaskKind::Number).optim;
        config.weight_decay = 0.1;
        let (b1, b2, eps, lr, wd) = (config.beta1, config.beta2, config.eps, 0.01, 0.1);
        for (name, decayed) in [("w.weight", true), ("w.bias", false)] {
            let x = Var::new(&[2.0f32], &dev).unwrap();
            let vars = vec![(name.to_owned(), &x)];
            let mut layout = ParamLayout::new();
            layout.push(name, vec![1], decayed);
            let mut opt = AdamW::new(&layout, &config);
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
                let got: Vec<f32> = x.as_tensor().to_vec1().unwrap();
                let got = f64::from(got[0]);
                assert!(
                    (got - p).abs() < 1e-6 * p.abs(),
                    "{name} step {t}: {got} vs {p}"
                );
            }
            assert_eq!(opt.updates(), 3);
        }
    }

    /// The fused flat update equals the per-variable candle update, and the moments survive a
    /// state round trip.
    #[test]
    fn flat_and_per_variable_updates_agree() {
        use candle_core::Device;
        let dev = Device::Cpu;
        let config = Preset::Tiny.config(TaskKind::Number).optim;
        let w = Var::new(&[[0.5f32, -1.0], [2.0, 0.25]], &dev).unwrap();
        let b = Var::new(&[0.1f32, -0.2], &dev).unwrap();
        let vars = vec![("a.weight".to_owned(), &w), ("a.bias".to_owned(), &b)];
        let mut layout = ParamLayout::new();
        layout.push("a.weight", vec![2, 2], true);
        layout.push("a.bias", vec![2], false);
        let mut per_var = AdamW::new(&layout, &config);
        let mut flat = AdamW::new(&layout, &config);
        let mut params = vec![0.5f32, -1.0, 2.0, 0.25, 0.1, -0.2];
        for step in 1..=4 {
            // loss = sum(w^2 * step) + sum(b^3)
            let loss = (w.as_tensor().sqr().unwrap().sum_all().unwrap() * step as f64).unwrap();
            let loss = (loss + b.as_tensor().powf(3.0).unwrap().sum_all().unwrap()).unwrap();
            let grads = loss.backward().unwrap();
            let mut g = grads
                .get(w.as_tensor())
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            g.extend(grads.get(b.as_tensor()).unwrap().to_vec1::<f32>().unwrap());
            per_var.step(&vars, &grads, 0.05).unwrap();
            flat.step_flat(&mut params, &g, 0.05).unwrap();
            let mut got: Vec<f32> = w.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
            got.extend(b.as_tensor().to_vec1::<f32>().unwrap());
            assert_eq!(got, params, "step {step}");
        }
        let mut restored = AdamW::new(&layout, &config);
        restored
            .restore(flat.state().unwrap(), flat.updates())
            .unwrap();
        assert_eq!(
            (restored.m.clone(), restored.v.clone(), restored.t),
            (flat.m, flat.v, 4)
        );
        let mut short = vec![0.0; 5];
        assert!(restored.step_flat(&mut short, &params, 0.1).is_err());
        // Vars that are not the layout's are refused.
        let swapped = vec![("a.bias".to_owned(), &b), ("a.weight".to_owned(), &w)];
        let grads = w.as_tensor().sum_all().unwrap().backward().unwrap();
        assert!(restored.step(&swapped, &grads, 0.1).is_err());
    }
}

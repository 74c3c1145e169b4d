//! The probes against a plain least-squares solve: a probe's predictions equal those of the
//! ridge regression onto one-hot classes solved by Gaussian elimination on the normal
//! equations (the probe itself uses a Cholesky solve); and on a trained number model the
//! embeddings' probe reads the distance to hop 1 (the position's own offset token) and not the
//! token at hop 1, which only attention can fetch.

mod common;

use candle_core::Device;
use common::{solve, uniform};
use ropelab_analysis::measure::hops::Source;
use ropelab_analysis::measure::probe::{probe_run, Probe, Target, RIDGE};
use ropelab_tasks::TaskKind;
use ropelab_train::{Preset, Trainer};

#[test]
fn probe_predictions_equal_a_gaussian_elimination_ridge() {
    let (n, d) = (60, 5);
    let mut next = uniform(3);
    let mut r = || next() as f32;
    let x: Vec<f32> = (0..n * d).map(|_| r()).collect();
    // Classes 2, 5, 9 from a noisy linear rule.
    let y: Vec<u32> = x
        .chunks(d)
        .map(|row| {
            let s = row[0] - row[1] + 0.3 * row[2];
            if s < -0.2 {
                2
            } else if s < 0.2 {
                5
            } else {
                9
            }
        })
        .collect();
    let probe = Probe::fit(&x, d, &y).unwrap();

    let classes = [2u32, 5, 9];
    let mean: Vec<f64> = (0..d)
        .map(|i| x.chunks(d).map(|row| f64::from(row[i])).sum::<f64>() / n as f64)
        .collect();
    let centred: Vec<Vec<f64>> = x
        .chunks(d)
        .map(|row| {
            row.iter()
                .zip(&mean)
                .map(|(&v, m)| f64::from(v) - m)
                .collect()
        })
        .collect();
    let mut gram: Vec<Vec<f64>> = (0..d)
        .map(|i| {
            (0..d)
                .map(|j| centred.iter().map(|c| c[i] * c[j]).sum())
                .collect()
        })
        .collect();
    let lambda = RIDGE * (0..d).map(|i| gram[i][i]).sum::<f64>() / d as f64;
    for (i, row) in gram.iter_mut().enumerate() {
        row[i] += lambda;
    }
    let weights: Vec<Vec<f64>> = classes
        .iter()
        .map(|&c| {
            let b: Vec<f64> = (0..d)
                .map(|i| {
                    centred
                        .iter()
                        .zip(&y)
                        .map(|(row, &l)| if l == c { row[i] } else { 0.0 })
                        .sum()
                })
                .collect();
            solve(gram.clone(), b)
        })
        .collect();
    // The intercept of centred least squares: each class's share of the training rows.
    let prior: Vec<f64> = classes
        .iter()
        .map(|&c| y.iter().filter(|&&l| l == c).count() as f64 / n as f64)
        .collect();
    let mut agree = 0;
    for _ in 0..200 {
        let row: Vec<f32> = (0..d).map(|_| 2.0 * r()).collect();
        let scores: Vec<f64> = weights
            .iter()
            .zip(&prior)
            .map(|(w, b)| {
                b + row
                    .iter()
                    .zip(&mean)
                    .zip(w)
                    .map(|((&v, m), wi)| (f64::from(v) - m) * wi)
                    .sum::<f64>()
            })
            .collect();
        let best = (0..3)
            .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
            .unwrap();
        agree += usize::from(probe.predict(&row) == classes[best]);
    }
    assert_eq!(agree, 200);
}

#[test]
fn the_embeddings_hold_the_offset_not_the_fetched_token() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("run");
    let mut config = Preset::Tiny.config(TaskKind::Number);
    config.optim.steps = 20;
    config.optim.save_every = 20;
    let mut trainer = Trainer::start(&root, config, &Device::Cpu).unwrap();
    trainer.run(|_| {}).unwrap();
    drop(trainer);
    let (step, rows) = probe_run(&root, 256, 1 << 20, &Device::Cpu, |_, _| {}).unwrap();
    assert_eq!(step, 20);
    // 3 streams x 2 sources x 2 targets x 4 hop counts (every one present on 256 samples).
    assert_eq!(rows.len(), 3 * 2 * 2 * 4);
    let at = |target, j| {
        rows.iter()
            .find(|r| r.source == Source::Every && r.stream == 0 && r.target == target && r.j == j)
            .unwrap()
    };
    // The distance to hop 1 is the position's own token: read from the embeddings (layer-
    // normalised, as the first block reads them: all but a few positions of a 20-step model).
    let own = at(Target::Distance, 1).accuracy;
    assert!(own >= 0.99, "{own}");
    // The token at hop 1 is elsewhere in the sequence: the embeddings cannot hold it.
    let token = at(Target::Token, 1);
    assert!(token.accuracy < 0.5, "{token:?}");
    assert!(token.n_train > 0 && token.n_test > 0);
    // A letter run is refused by name.
    let letter = dir.path().join("letter");
    let mut config = Preset::Tiny.config(TaskKind::Letter);
    config.optim.steps = 2;
    config.optim.save_every = 2;
    Trainer::start(&letter, config, &Device::Cpu)
        .unwrap()
        .run(|_| {})
        .unwrap();
    let err = probe_run(&letter, 16, 1 << 20, &Device::Cpu, |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("is a letter task run"), "{err}");
}

//! Dataset-level guarantees: validity at scale, exact balance, determinism, disjoint splits,
//! and length extension.

use std::collections::{HashMap, HashSet};

use ropelab_tasks::{Dataset, Layout, Split, Task, TaskKind};

fn task(kind: TaskKind) -> Task {
    Task::new(kind, Layout::default()).unwrap()
}

#[test]
fn validate_accepts_100000_samples_of_each_task() {
    for kind in TaskKind::ALL {
        let data = Dataset::new(task(kind), 7, Split::Train, 100_000, 0).unwrap();
        for (i, sample) in data.iter().enumerate() {
            let sample = sample.unwrap();
            if let Err(e) = data.task().validate(&sample) {
                panic!("{kind} sample {i} invalid: {e}: {sample:?}");
            }
        }
    }
}

/// Counts (slot, answer, hops) read off the samples themselves, not off the balancer.
fn combo_counts(data: &Dataset) -> HashMap<(usize, u32, usize), usize> {
    let mut counts = HashMap::new();
    for sample in data.iter() {
        let s = sample.unwrap();
        *counts
            .entry((s.target_pos - data.extra(), s.answer_id, s.hops))
            .or_default() += 1;
    }
    counts
}

#[test]
fn balance_is_exact_for_whole_repeats() {
    for kind in TaskKind::ALL {
        let t = task(kind);
        let n_combos = t.n_combos();
        assert_eq!(n_combos, if kind == TaskKind::Number { 3840 } else { 2048 });
        let data = Dataset::new(t, 1, Split::Test, 3 * n_combos, 0).unwrap();
        let counts = combo_counts(&data);
        assert_eq!(counts.len(), n_combos, "{kind}: every combination appears");
        assert!(
            counts.values().all(|&c| c == 3),
            "{kind}: each exactly 3 times"
        );
        let mut per_hop = HashMap::<usize, usize>::new();
        for ((_, _, h), c) in counts {
            *per_hop.entry(h).or_default() += c;
        }
        assert_eq!(per_hop.len(), 4);
        assert!(
            per_hop.values().all(|&c| c == 3 * n_combos / 4),
            "{per_hop:?}"
        );
    }
}

#[test]
fn balance_remainder_is_distinct_combinations() {
    let t = task(TaskKind::Letter);
    let n = 2 * t.n_combos() + 777;
    let data = Dataset::new(t, 5, Split::Val, n, 0).unwrap();
    let counts = combo_counts(&data);
    let threes = counts.values().filter(|&&c| c == 3).count();
    assert_eq!(threes, 777);
    assert!(counts.values().all(|&c| c == 2 || c == 3));
}

#[test]
fn hop_counts_are_in_equal_shares_at_any_size() {
    for kind in TaskKind::ALL {
        for n in [4, 40, 1001, 4560, 43_200] {
            let data = Dataset::new(task(kind), 2, Split::Test, n, 0).unwrap();
            let mut per_hop = [0usize; 5];
            for sample in data.iter() {
                per_hop[sample.unwrap().hops] += 1;
            }
            let (lo, hi) = (n / 4, n.div_ceil(4));
            assert!(
                per_hop[1..].iter().all(|&c| c == lo || c == hi),
                "{kind} {n}: {per_hop:?}"
            );
        }
    }
}

#[test]
fn order_is_shuffled() {
    let data = Dataset::new(task(TaskKind::Number), 0, Split::Train, 3840, 0).unwrap();
    let hops: Vec<usize> = (0..40).map(|i| data.sample(i).unwrap().hops).collect();
    assert!(hops.windows(2).any(|w| w[0] != w[1]), "{hops:?}");
    let slots: HashSet<usize> = (0..40)
        .map(|i| data.sample(i).unwrap().target_pos)
        .collect();
    assert!(slots.len() > 3, "{slots:?}");
}

#[test]
fn same_seed_same_samples_other_seed_other_samples() {
    for kind in TaskKind::ALL {
        let a = Dataset::new(task(kind), 42, Split::Train, 500, 0).unwrap();
        let b = Dataset::new(task(kind), 42, Split::Train, 500, 0).unwrap();
        let c = Dataset::new(task(kind), 43, Split::Train, 500, 0).unwrap();
        let all = |d: &Dataset| d.iter().map(Result::unwrap).collect::<Vec<_>>();
        assert_eq!(all(&a), all(&b));
        let differ = all(&a)
            .iter()
            .zip(all(&c))
            .filter(|(x, y)| **x != *y)
            .count();
        assert!(differ > 490, "{kind}: only {differ} of 500 differ");
        // Any sample regenerates alone.
        assert_eq!(a.sample(321).unwrap(), all(&a)[321]);
    }
}

#[test]
fn splits_never_overlap() {
    for kind in TaskKind::ALL {
        let mut seen: HashMap<Vec<u32>, Split> = HashMap::new();
        for (split, n) in [
            (Split::Train, 60_000),
            (Split::Val, 10_000),
            (Split::Test, 20_000),
        ] {
            // Even the same seed for every split gives disjoint sets.
            let data = Dataset::new(task(kind), 9, split, n, 0).unwrap();
            for sample in data.iter() {
                let ids = sample.unwrap().ids;
                assert_eq!(Split::of_core(&ids), split);
                if let Some(other) = seen.insert(ids, split) {
                    assert_eq!(other, split, "{kind}: a {split} sample is also in {other}");
                }
            }
        }
    }
}

#[test]
fn length_extension_keeps_the_core_and_validates() {
    for kind in TaskKind::ALL {
        let plain = Dataset::new(task(kind), 3, Split::Test, 2000, 0).unwrap();
        for extra in [1, 50, 833] {
            let long = Dataset::new(task(kind), 3, Split::Test, 2000, extra).unwrap();
            for i in 0..2000 {
                let (p, l) = (plain.sample(i).unwrap(), long.sample(i).unwrap());
                assert_eq!(l.ids.len(), 17 + extra);
                assert_eq!(&l.ids[extra..], &p.ids[..]);
                assert_eq!(l.target_pos, p.target_pos + extra);
                assert_eq!((l.answer_id, l.hops), (p.answer_id, p.hops));
                long.task().validate(&l).unwrap();
            }
        }
    }
}

#[test]
fn other_layouts_generate_valid_samples() {
    let layouts = [
        (2, 1, vec![1, 2]),
        (3, 5, vec![1, 6]),
        (16, 24, vec![1, 2, 3, 4, 5, 6, 7]),
    ];
    for kind in TaskKind::ALL {
        for (target_window, pre_window, hops) in &layouts {
            let layout = Layout {
                target_window: *target_window,
                pre_window: *pre_window,
                hops: hops.clone(),
                ..Layout::default()
            };
            let t = Task::new(kind, layout.clone()).unwrap();
            let data = Dataset::new(t, 1, Split::Train, 3000, 4).unwrap();
            for sample in data.iter() {
                let s = sample.unwrap();
                data.task()
                    .validate(&s)
                    .unwrap_or_else(|e| panic!("{kind} {layout:?}: {e}"));
            }
        }
    }
}

#[test]
fn a_layout_too_small_for_disjoint_splits_is_an_error() {
    // One letter, one integer: each combination has exactly one instance, which lies in one
    // split only, so the other splits cannot be filled.
    let layout = Layout {
        target_window: 1,
        pre_window: 1,
        hops: vec![1],
        ..Layout::default()
    };
    let t = Task::new(TaskKind::Number, layout).unwrap();
    let errors = Split::ALL
        .iter()
        .map(|&split| {
            let data = Dataset::new(t.clone(), 0, split, 120, 0).unwrap();
            data.iter().filter(Result::is_err).count()
        })
        .sum::<usize>();
    assert_eq!(errors, 2 * 120, "each instance fits exactly one split");
}

#[test]
fn bad_requests_are_errors() {
    let t = task(TaskKind::Number);
    assert!(Dataset::new(t.clone(), 0, Split::Train, 0, 0).is_err());
    let data = Dataset::new(t, 0, Split::Train, 10, 0).unwrap();
    assert!(data.sample(10).is_err());
    assert!("nope".parse::<TaskKind>().is_err());
    assert!("dev".parse::<Split>().is_err());
}

/// The token strings of `n` samples of `kind` under `layout` (seed 2, train split, `extra`).
fn token_strings(kind: TaskKind, layout: Layout, n: usize, extra: usize) -> Vec<Vec<String>> {
    let t = Task::new(kind, layout).unwrap();
    let data = Dataset::new(t, 2, Split::Train, n, extra).unwrap();
    data.iter()
        .map(|s| {
            let s = s.unwrap();
            data.task().validate(&s).unwrap();
            s.ids
                .iter()
                .map(|&id| data.task().vocab().token(id).unwrap().to_owned())
                .collect()
        })
        .collect()
}

#[test]
fn other_vocabulary_sizes_generate_valid_samples() {
    let sized = |offsets, letters, numbers| Layout {
        offsets,
        letters,
        numbers,
        ..Layout::default()
    };
    // The paper's sizes written out give the paper's samples.
    for kind in TaskKind::ALL {
        assert_eq!(
            token_strings(kind, sized(Some(16), Some(8), Some(8)), 200, 3),
            token_strings(kind, Layout::default(), 200, 3)
        );
    }
    // More offset tokens than the 17-token core needs: valid, and offsets above 16 never
    // appear in it (the split hash reads ids, so the instances differ from the default's).
    let wider = token_strings(TaskKind::Number, sized(Some(32), None, None), 2000, 3);
    let big = |t: &String| t.parse::<usize>().is_ok_and(|o| o > 16);
    assert!(!wider.iter().flatten().any(big));
    // Fewer and more letters and numbers: valid, and only the alphabet's symbols appear.
    for (letters, numbers) in [(5, 5), (16, 16), (26, 12)] {
        let samples = token_strings(
            TaskKind::Letter,
            sized(None, Some(letters), Some(numbers)),
            3000,
            40,
        );
        let max_letter = (b'a' + letters as u8 - 1) as char;
        for tokens in &samples {
            for t in tokens {
                let first = t.chars().next().unwrap();
                assert!(first <= max_letter, "{t} outside {letters} letters");
                let rest = &t[1..];
                if let Ok(n) = rest.parse::<usize>() {
                    assert!((1..=numbers).contains(&n), "{t} outside {numbers} numbers");
                }
            }
        }
    }
    // A 32-offset layout of 33 tokens uses its offsets.
    let wide = Layout {
        target_window: 16,
        pre_window: 16,
        offsets: Some(32),
        ..Layout::default()
    };
    let samples = token_strings(TaskKind::Number, wide, 2000, 0);
    assert!(samples.iter().flatten().any(|t| t == "32"));
}

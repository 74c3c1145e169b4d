//! `validate` against independent reference solvers and on mutated samples (property tests).

use proptest::prelude::*;
use ropelab_tasks::{letter, number, Dataset, Invalid, Layout, Split, Task, TaskKind};

/// Number task by dynamic programming left to right: each position's landing letter and
/// depth, without following any chain from the query.
fn number_reference(tokens: &[&str]) -> Option<(usize, usize)> {
    let mut resolved: Vec<Option<(usize, usize)>> = Vec::with_capacity(tokens.len());
    for (p, t) in tokens.iter().enumerate() {
        let r = match t.parse::<usize>() {
            Err(_) => Some((p, 0)),
            Ok(off) if off >= 1 && off <= p => resolved[p - off].map(|(pos, d)| (pos, d + 1)),
            Ok(_) => None,
        };
        resolved.push(r);
    }
    resolved.last().copied().flatten().filter(|&(_, d)| d > 0)
}

/// Letter task with prefix tables: for each position and symbol, how many earlier tokens start
/// with it and the last one that does.
fn letter_reference(tokens: &[&str]) -> Option<(usize, usize)> {
    let chars: Vec<Vec<char>> = tokens.iter().map(|t| t.chars().collect()).collect();
    if chars.iter().any(|c| c.len() != 2) {
        return None;
    }
    let mut table = vec![std::collections::HashMap::<char, (usize, usize)>::new()];
    for (p, c) in chars.iter().enumerate() {
        let mut next = table[p].clone();
        let e = next.entry(c[0]).or_insert((0, 0));
        *e = (e.0 + 1, p);
        table.push(next);
    }
    let mut pos = tokens.len().checked_sub(1)?;
    let mut hops = 0;
    while !chars[pos][1].is_ascii_digit() {
        match table[pos].get(&chars[pos][1]) {
            Some(&(1, j)) => pos = j,
            _ => return None,
        }
        hops += 1;
    }
    (hops > 0).then_some((pos, hops))
}

fn solved(r: Result<ropelab_tasks::Solution, Invalid>) -> Option<(usize, usize)> {
    r.ok().map(|s| (s.answer_pos, s.hops))
}

fn number_tokens() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop_oneof![
            Just("x".to_string()),
            (0usize..14).prop_map(|i| i.to_string())
        ],
        1..14,
    )
}

fn letter_tokens() -> impl Strategy<Value = Vec<String>> {
    let sym = prop_oneof![Just('a'), Just('b'), Just('c'), Just('d')];
    let second = prop_oneof![
        Just('a'),
        Just('b'),
        Just('c'),
        Just('d'),
        Just('1'),
        Just('2')
    ];
    prop::collection::vec((sym, second).prop_map(|(a, b)| format!("{a}{b}")), 1..12)
}

fn dataset(kind: TaskKind) -> Dataset {
    Dataset::new(
        Task::new(kind, Layout::default()).unwrap(),
        11,
        Split::Train,
        50_000,
        0,
    )
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(512)
    })]

    #[test]
    fn number_solver_matches_reference(tokens in number_tokens()) {
        let t: Vec<&str> = tokens.iter().map(String::as_str).collect();
        prop_assert_eq!(solved(number::solve(&t)), number_reference(&t));
    }

    #[test]
    fn letter_solver_matches_reference(tokens in letter_tokens()) {
        let t: Vec<&str> = tokens.iter().map(String::as_str).collect();
        prop_assert_eq!(solved(letter::solve(&t)), letter_reference(&t));
    }

    #[test]
    fn wrong_answer_or_hop_labels_are_rejected(
        kind in prop_oneof![Just(TaskKind::Number), Just(TaskKind::Letter)],
        index in 0usize..50_000,
        delta in 1u32..60,
        hop_delta in 1usize..4,
    ) {
        let data = dataset(kind);
        let task = data.task();
        let sample = data.sample(index).unwrap();
        prop_assert!(task.validate(&sample).is_ok());

        let mut bad = sample.clone();
        bad.answer_id = (bad.answer_id + delta) % task.vocab().len() as u32;
        prop_assert!(task.validate(&bad).is_err());

        let mut bad = sample.clone();
        bad.hops += hop_delta;
        prop_assert!(task.validate(&bad).is_err());

        let mut bad = sample.clone();
        let len = bad.ids.len();
        bad.target_pos = (bad.target_pos + 1 + delta as usize % (len - 1)) % len;
        prop_assert!(task.validate(&bad).is_err());
    }

    #[test]
    fn changing_the_answer_token_is_rejected(
        kind in prop_oneof![Just(TaskKind::Number), Just(TaskKind::Letter)],
        index in 0usize..50_000,
        other in 0usize..64,
    ) {
        let data = dataset(kind);
        let task = data.task();
        let mut bad = data.sample(index).unwrap();
        // Another token of the target type (letters: 17.., letter-number pairs: 1..=64).
        let (first, count) = match kind { TaskKind::Number => (17u32, 120u32), TaskKind::Letter => (1, 64), TaskKind::Language | TaskKind::Offset | TaskKind::Canonical | TaskKind::Ambiguous => unreachable!("multi-hop tasks only") };
        let replacement = first + (bad.answer_id - first + 1 + other as u32 % (count - 1)) % count;
        bad.ids[bad.target_pos] = replacement;
        prop_assert!(task.validate(&bad).is_err());
    }

    #[test]
    fn a_second_token_with_a_chain_letter_is_rejected(index in 0usize..50_000, pick in 0usize..64) {
        // Letter task: give an earlier token the first letter of the answer -> ambiguous chain.
        let data = dataset(TaskKind::Letter);
        let task = data.task();
        let mut bad = data.sample(index).unwrap();
        let answer = task.vocab().token(bad.answer_id).unwrap().chars().next().unwrap();
        let others: Vec<usize> = (0..bad.ids.len() - 1).filter(|&p| p != bad.target_pos).collect();
        let p = others[pick % others.len()];
        let token = task.vocab().token(bad.ids[p]).unwrap();
        let second = token.chars().nth(1).unwrap();
        bad.ids[p] = task.vocab().id(&format!("{answer}{second}")).unwrap();
        let verdict = task.validate(&bad);
        // If the changed token lies before the element that looks the letter up, the chain
        // is ambiguous; if it lies after it, the chain still holds.
        let tokens: Vec<&str> = bad.ids.iter().map(|&i| task.vocab().token(i).unwrap()).collect();
        prop_assert_eq!(verdict.is_ok(), letter_reference(&tokens).is_some());
        prop_assert!(p > bad.target_pos || verdict.is_err());
    }

    #[test]
    fn any_single_token_change_agrees_with_the_reference(
        kind in prop_oneof![Just(TaskKind::Number), Just(TaskKind::Letter)],
        index in 0usize..50_000,
        pos in 0usize..17,
        id in 0u32..140,
    ) {
        let data = dataset(kind);
        let task = data.task();
        let mut bad = data.sample(index).unwrap();
        bad.ids[pos] = id;
        let verdict = task.validate(&bad).is_ok();
        let tokens: Option<Vec<&str>> = bad.ids.iter().map(|&i| task.vocab().token(i)).collect();
        let expected = tokens.is_some_and(|t| {
            let in_type = t.iter().enumerate().all(|(p, tok)| {
                let target_type = match kind {
                    TaskKind::Number => tok.parse::<usize>().is_err(),
                    TaskKind::Letter => tok.chars().nth(1).is_some_and(|c| c.is_ascii_digit()),
                    TaskKind::Language | TaskKind::Offset | TaskKind::Canonical | TaskKind::Ambiguous => unreachable!("multi-hop tasks only"),
                };
                let offset_inside = tok.parse::<usize>().map_or(true, |k| k <= p);
                *tok != "<pad>" && target_type == (p < 8) && offset_inside
            });
            let reference = match kind {
                TaskKind::Number => number_reference(&t),
                TaskKind::Letter => letter_reference(&t),
                TaskKind::Language | TaskKind::Offset | TaskKind::Canonical | TaskKind::Ambiguous => unreachable!("multi-hop tasks only"),
            };
            in_type
                && reference == Some((bad.target_pos, bad.hops))
                && bad.ids[bad.target_pos] == bad.answer_id
        });
        prop_assert_eq!(verdict, expected);
    }
}

/// A vocabulary size of the other task is refused when it is not that task's default (it would
/// be ignored), and accepted at the default, which a sweep varying the task may carry (issue
/// 55, third pass).
#[test]
fn the_other_tasks_vocabulary_size_is_refused_unless_it_is_its_default() {
    let with = |f: fn(&mut Layout)| {
        let mut l = Layout::default();
        f(&mut l);
        l
    };
    for (kind, layout, key) in [
        (
            TaskKind::Number,
            with(|l| l.letters = Some(5)),
            "layout.letters = 5",
        ),
        (
            TaskKind::Number,
            with(|l| l.numbers = Some(16)),
            "layout.numbers = 16",
        ),
        (
            TaskKind::Letter,
            with(|l| l.offsets = Some(32)),
            "layout.offsets = 32",
        ),
    ] {
        let err = layout.check_for(kind).expect_err(key).to_string();
        assert!(err.contains(key), "{err}");
        // The task itself builds from it (a study's shared layout), and ignores the size.
        let own = Task::new(kind, layout.for_task(kind)).unwrap();
        assert_eq!(
            Task::new(kind, layout).unwrap().vocab().len(),
            own.vocab().len()
        );
    }
    let defaults = with(|l| {
        l.letters = Some(8);
        l.numbers = Some(8);
        l.offsets = Some(l.target_window + l.pre_window);
    });
    assert!(defaults.check_for(TaskKind::Number).is_ok());
    assert!(defaults.check_for(TaskKind::Letter).is_ok());
}

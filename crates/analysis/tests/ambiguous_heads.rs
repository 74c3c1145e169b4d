//! The ambiguous task's conflict split separates the mechanisms: a hand-built positional head
//! (RoPE, the query rotated by the offset, as the theory lab's Index head) answers the
//! positional value on every conflict sample, a hand-built symbolic head (content only, as the
//! Retrieval head) the symbolic value; both solve the agree and length samples. Each head is
//! one softmax head through the trained models' attention code.

use candle_core::{Device, Tensor};
use ropelab_model::attention::attend;
use ropelab_model::{AttentionKind, Hooks, PositionEncoding, RopeLayout};
use ropelab_tasks::ambiguous::{Kind, Mechanism, LETTERS};
use ropelab_tasks::{AmbiguousSample, AmbiguousTask, Split};

const PLANES: usize = 12;

fn rot(angle: f64) -> [f32; 2] {
    [-angle.sin() as f32, angle.cos() as f32]
}

#[derive(Clone, Copy)]
enum Head {
    Positional,
    Symbolic,
}

/// The value the head reads at the query (the last token, `?c5`): the positional head by
/// rho(-o theta) on its query, the symbolic head by the query's letter in content planes that
/// never turn.
fn answer(task: &AmbiguousTask, head: Head, s: &AmbiguousSample) -> u32 {
    let vocab = task.vocab();
    let t = s.ids.len();
    let token = |p: usize| vocab.token(s.ids[p]).unwrap().to_owned();
    let query = token(t - 1);
    let query_letter: String = query[1..].trim_end_matches(char::is_numeric).to_owned();
    let letters: Vec<String> = (0..t - 1)
        .map(|p| token(p).trim_end_matches(char::is_numeric).to_owned())
        .collect();
    let mut q = vec![0f32; t * 2 * PLANES];
    let mut k = vec![0f32; t * 2 * PLANES];
    let (read_at, thetas): (usize, Vec<f64>) = match head {
        Head::Positional => {
            let o: f64 = query[1 + query_letter.len()..].parse().unwrap();
            for p in 0..t {
                for i in 0..PLANES {
                    let theta = std::f64::consts::PI / f64::from(1u32 << i);
                    k[(p * PLANES + i) * 2..][..2].copy_from_slice(&rot(0.0));
                    q[(p * PLANES + i) * 2..][..2].copy_from_slice(&rot(-o * theta));
                }
            }
            (
                t - 1,
                (0..PLANES)
                    .map(|i| std::f64::consts::PI / f64::from(1u32 << i))
                    .collect(),
            )
        }
        Head::Symbolic => {
            // Letter l sits at angle 2 pi l / LETTERS in one unturned plane.
            let angle = |name: &str| {
                let l = (0..LETTERS)
                    .position(|i| ropelab_tasks::letter_names(i + 1).pop().unwrap() == name)
                    .unwrap();
                2.0 * std::f64::consts::PI * l as f64 / LETTERS as f64
            };
            for (p, name) in letters.iter().enumerate() {
                k[p * 2 * PLANES..][..2].copy_from_slice(&rot(angle(name)));
            }
            q[(t - 1) * 2 * PLANES..][..2].copy_from_slice(&rot(angle(&query_letter)));
            (t - 1, vec![0.0; PLANES])
        }
    };
    let n = vocab.len();
    let mut v = vec![0f32; t * n];
    for p in 0..t - 1 {
        v[p * n + s.ids[p] as usize] = 1.0;
    }
    let dev = Device::Cpu;
    let z = attend(
        0,
        Tensor::from_vec(q, (1, 1, t, 2 * PLANES), &dev).unwrap(),
        Tensor::from_vec(k, (1, 1, t, 2 * PLANES), &dev).unwrap(),
        &Tensor::from_vec(v, (1, 1, t, n), &dev).unwrap(),
        &PositionEncoding::angles(thetas, RopeLayout::Interleaved),
        AttentionKind::Softmax,
        2000.0,
        &mut Hooks::new(),
        None,
    )
    .unwrap(); // [1, 1, pos, vocab]
    let row: Vec<f32> = z
        .squeeze(0)
        .unwrap()
        .squeeze(0)
        .unwrap()
        .get(read_at)
        .unwrap()
        .to_vec1()
        .unwrap();
    let item = row
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .unwrap()
        .0 as u32;
    // The read item's value, as an answer id.
    let value: usize = vocab
        .token(item)
        .unwrap()
        .trim_start_matches(|c: char| c.is_ascii_lowercase())
        .parse()
        .unwrap();
    task.answer_id(value - 1)
}

#[test]
fn the_conflict_split_separates_the_hand_built_heads() {
    let task = AmbiguousTask::default_layout();
    for i in 0..300 {
        let s = task.sample(0, Kind::Conflict, i);
        assert_eq!(
            task.mechanism(&s, answer(&task, Head::Positional, &s)),
            Mechanism::Positional,
            "{s:?}"
        );
        assert_eq!(
            task.mechanism(&s, answer(&task, Head::Symbolic, &s)),
            Mechanism::Symbolic,
            "{s:?}"
        );
        for kind in [Kind::Agree(Split::Test), Kind::Length(64)] {
            let s = task.sample(0, kind, i);
            let (right, same) = s.answers(&task);
            assert_eq!(right, same);
            for head in [Head::Positional, Head::Symbolic] {
                assert_eq!(answer(&task, head, &s), right, "{s:?}");
            }
        }
    }
}

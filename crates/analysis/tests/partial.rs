//! Partial Induction's plane margins on the hand-built two-angle head, whose answer is known:
//! the angle-0 plane carries all of the content margin and none of the recency margin, the
//! turning plane the reverse; a head without its recency plane does not "use two kinds".

use ropelab_analysis::measure::partial::{
    hand_head, hand_view, plane_margins, sample_margins, TwoAngles,
};
use ropelab_tasks::{CanonicalKind, CanonicalTask, Split};
use ropelab_theory::construct::HandHead;

#[test]
fn the_hand_built_head_splits_content_and_recency_between_its_planes() {
    let task = CanonicalTask::new(CanonicalKind::Partial, 16, 4, 4).unwrap();
    let head = hand_head(&task).unwrap();
    let samples: Vec<_> = (0..64)
        .map(|i| {
            let s = task.sample(3, Split::Test, i);
            (hand_view(&head, &s.ids).unwrap(), s.ids)
        })
        .collect();
    let theta = std::f64::consts::PI / 32.0;
    let m = plane_margins(&samples, &task, &[0.0, theta]).unwrap();
    assert_eq!(m.len(), 2);
    assert_eq!(m[0].recency, 0.0, "an angle-0 plane has no recency");
    assert!(
        m[1].content.abs() < 1e-9,
        "equal keys carry no content: {m:?}"
    );
    assert!(m[0].content > 0.0 && m[1].recency > 0.0, "{m:?}");
    let two = TwoAngles::of(&m);
    assert_eq!((two.content_theta, two.recency_theta), (0.0, theta));
    assert!(two.holds(), "{two:?}");

    // By hand on one sample: items at 0 and 1 hold the queried symbol (1 is the answer), so the
    // recency margin of plane 1 is beta * 0.5 * (cos(theta d_1) - cos(theta d_0)) with
    // d = 16 - position, and its content margin is 0.
    let ids: Vec<u32> = vec![4, 5, 0, 8, 12, 0, 8, 12, 0, 8, 12, 0, 8, 12, 0, 8, 17];
    // Answers follow 16 items and 4 queries: attribute 1 is id 21.
    assert_eq!(task.solve(&ids).unwrap(), (21, 1));
    let view = hand_view(&head, &ids).unwrap();
    let (content, recency) = sample_margins(&view, &task, &ids).unwrap();
    let want = 200.0 * 0.5 * ((theta * 15.0).cos() - (theta * 16.0).cos());
    let recency = recency.unwrap();
    assert!((recency[1] - want).abs() < 1e-9, "{recency:?} vs {want}");
    assert!(content.unwrap()[1].abs() < 1e-9);

    // Content alone: no recency margin, so not two kinds of planes.
    let content_only = HandHead::partial(4, 4, theta, 1.0, 0.0, 200.0).unwrap();
    let samples: Vec<_> = samples
        .iter()
        .map(|(_, ids)| (hand_view(&content_only, ids).unwrap(), ids.clone()))
        .collect();
    let m = plane_margins(&samples, &task, &[0.0, theta]).unwrap();
    assert!(!TwoAngles::of(&m).holds(), "{m:?}");
}

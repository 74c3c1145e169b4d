//! The theorem's bounds, checked for every n up to 1,000 on a grid of angles.

use ropelab_theory::discrepancy::{index, index_bound_best_input, retrieval};

#[test]
fn index_margin_obeys_the_theorem_for_every_n_up_to_1000() {
    let mut violations_best_input = 0;
    for k in 1..=200 {
        let theta = k as f64 * 0.0157; // a grid over (0, pi]
        for r in index(theta, 1000).unwrap() {
            assert!(r.delta <= r.bound + 1e-12, "theta {theta}: {r:?}");
            assert!(r.delta <= 1.0 - theta.cos() + 1e-12);
            assert!(
                r.delta_max <= index_bound_best_input(theta, r.n) + 1e-12,
                "theta {theta}: {r:?}"
            );
            if r.delta_max > r.bound + 1e-12 {
                violations_best_input += 1;
            }
        }
    }
    // The best input (a centred integer query) is NOT bounded by 2 pi^2 / n^2.
    assert!(violations_best_input > 0);
}

#[test]
fn retrieval_margin_obeys_the_theorem_within_its_range() {
    // theta < omega / (2 n0): the matching key always wins and the worst margin is at most
    // 1 - cos(omega - n theta) (for n >= 2, where a rival can sit at distance n).
    for alphabet in [4, 8, 26] {
        let omega = 2.0 * std::f64::consts::PI / alphabet as f64;
        let n0 = 1000;
        for frac in [0.1, 0.5, 0.99] {
            let theta = frac * omega / (2.0 * n0 as f64);
            for r in retrieval(theta, alphabet, n0).unwrap() {
                assert!(r.delta > 0.0, "{alphabet} {theta}: {r:?}");
                if r.n >= 2 {
                    assert!(r.delta <= r.bound + 1e-12, "{alphabet} {theta}: {r:?}");
                }
            }
        }
    }
}

#[test]
fn positional_margins_vanish_symbolic_ones_do_not() {
    // The paper's figure: theta = g_2 (0.866) for Index, theta = g_42 (0.0027), |ALPH| = 8.
    let idx = index(0.866, 100).unwrap();
    let ret = retrieval(0.0027, 8, 100).unwrap();
    assert!(idx[99].delta < 0.01 * idx[0].delta, "{:?}", idx[99]);
    assert!(ret[99].delta > 0.25 * ret[0].delta, "{:?}", ret[99]);
    assert!(ret[99].delta > 10.0 * idx[99].delta);
}

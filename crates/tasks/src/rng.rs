//! Deterministic randomness: one ChaCha stream per (seed, stream, index, attempt), and a keyed
//! pseudo-random permutation so that the balanced, shuffled order of a dataset is known for any
//! index without materialising the list.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// SplitMix64 finaliser: a fast, well-mixed 64-bit bijection.
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Hash of a sequence of words (order-sensitive), used for split buckets.
pub fn hash_words(words: impl IntoIterator<Item = u64>) -> u64 {
    words
        .into_iter()
        .fold(0x6A09_E667_F3BC_C908, |h, w| mix64(h ^ mix64(w)))
}

/// The random stream for one draw: the 256-bit ChaCha key is the four tags verbatim, so two
/// distinct tag tuples never share a stream.
pub fn stream(tags: [u64; 4]) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    for (chunk, tag) in key.chunks_exact_mut(8).zip(tags) {
        chunk.copy_from_slice(&tag.to_le_bytes());
    }
    ChaCha8Rng::from_seed(key)
}

const ROUNDS: usize = 6;

/// A keyed pseudo-random permutation of `0..n` (balanced Feistel network on the smallest
/// power of four >= n, restricted to `0..n` by cycle walking). O(1) memory, O(1) expected time.
#[derive(Debug, Clone)]
pub struct Permutation {
    n: u64,
    half_bits: u32,
    keys: [u64; ROUNDS],
}

impl Permutation {
    /// The permutation of `0..n` selected by `key`.
    pub fn new(n: u64, key: u64) -> Self {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        let mut keys = [0u64; ROUNDS];
        let mut k = key;
        for slot in &mut keys {
            k = mix64(k);
            *slot = k;
        }
        Self { n, half_bits, keys }
    }

    /// Size of the permuted range.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The image of `i` (`i < n`).
    pub fn apply(&self, i: u64) -> u64 {
        debug_assert!(i < self.n, "permutation index {i} out of range {}", self.n);
        let mut x = i;
        loop {
            x = self.feistel(x);
            if x < self.n {
                return x;
            }
        }
    }

    fn feistel(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut left, mut right) = (x >> self.half_bits, x & mask);
        for key in self.keys {
            let next = left ^ (mix64(right ^ key) & mask);
            left = right;
            right = next;
        }
        (left << self.half_bits) | right
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn permutation_is_a_bijection(n in 1u64..3000, key in any::<u64>()) {
            let p = Permutation::new(n, key);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let j = p.apply(i);
                prop_assert!(j < n);
                prop_assert!(!seen[j as usize], "{} hit twice", j);
                seen[j as usize] = true;
            }
        }
    }

    #[test]
    fn permutation_depends_on_key_and_is_not_identity() {
        let a = Permutation::new(1000, 1);
        let b = Permutation::new(1000, 2);
        let fixed_a = (0..1000).filter(|&i| a.apply(i) == i).count();
        let same = (0..1000).filter(|&i| a.apply(i) == b.apply(i)).count();
        // A random permutation has about one fixed point; allow generous slack.
        assert!(fixed_a < 20, "{fixed_a} fixed points");
        assert!(same < 20, "{same} agreements between keys");
    }

    #[test]
    fn streams_differ_by_any_tag() {
        use rand::Rng;
        let draw = |tags| stream(tags).random::<u64>();
        let base = draw([1, 2, 3, 4]);
        assert_eq!(base, draw([1, 2, 3, 4]));
        for k in 0..4 {
            let mut tags = [1, 2, 3, 4];
            tags[k] += 1;
            assert_ne!(base, draw(tags));
        }
    }
}

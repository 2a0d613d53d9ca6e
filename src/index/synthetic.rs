//! Random-but-clustered unit vectors, for tests and `scripts/bench-index.sh`: `centres` unit
//! centres (Gaussian, normalised; drawn from `seed`), and each point `normalise(c + noise · g /
//! √dim)` for a centre `c` drawn uniformly and a standard Gaussian `g` (drawn from
//! `seed` and the side). Two sides (queries and database) share the centres. At noise 1 a point's
//! cosine with its centre is about 0.71 and with another point of its centre about 0.5, while
//! unrelated points are near 0 (± 1/√dim).

use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

/// The generator's settings.
#[derive(Debug, Clone, Copy)]
pub struct Clustered {
    pub dim: usize,
    pub centres: usize,
    pub noise: f32,
    pub seed: u64,
}

impl Clustered {
    fn centre_rows(&self) -> Vec<f32> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(self.seed);
        let mut c: Vec<f32> = (0..self.centres * self.dim).map(|_| rng.sample::<f32, _>(StandardNormal)).collect();
        super::kmeans::normalize_rows(&mut c, self.dim);
        c
    }

    /// `n` points of side `side` (e.g. 0 for one side, 1 for the other).
    pub fn points(&self, side: u64, n: usize) -> Vec<f32> {
        let centres = self.centre_rows();
        let d = self.dim;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
            self.seed ^ (side.wrapping_add(1)).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        );
        let scale = self.noise / (d as f32).sqrt();
        let mut out = Vec::with_capacity(n * d);
        for _ in 0..n {
            let c = rng.random_range(0..self.centres);
            let start = out.len();
            out.extend(centres[c * d..(c + 1) * d].iter().map(|&x| x + scale * rng.sample::<f32, _>(StandardNormal)));
            super::kmeans::normalize_rows(&mut out[start..], d);
        }
        out
    }
}

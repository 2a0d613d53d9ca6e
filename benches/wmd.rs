//! Word Mover's Distance on random clouds (standard normal, dimension 384 like e5-small's
//! token vectors), one thread: the exact solver with and without its cost matrix, and Sinkhorn
//! with its default options. `cargo bench --bench wmd`.

use criterion::{criterion_group, criterion_main, Criterion};
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};
use std::time::Duration;
use xsent::train::recipes::wmd::{cost_matrix, emd_uniform, sinkhorn, wmd, SinkhornOptions};

const DIM: usize = 384;

fn cloud(rng: &mut rand_chacha::ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n * DIM).map(|_| StandardNormal.sample(rng)).collect()
}

fn bench(c: &mut Criterion) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let mut g = c.benchmark_group("wmd-384d");
    g.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    for n in [32, 128, 512] {
        let (a, b) = (cloud(&mut rng, n), cloud(&mut rng, n));
        let cost = cost_matrix(&a, &b, DIM).unwrap();
        g.bench_function(format!("exact {n}x{n} (cost matrix + network simplex)"), |bch| {
            bch.iter(|| wmd(&a, &b, DIM).unwrap())
        });
        g.bench_function(format!("cost matrix {n}x{n}"), |bch| bch.iter(|| cost_matrix(&a, &b, DIM).unwrap()));
        g.bench_function(format!("network simplex {n}x{n}"), |bch| bch.iter(|| emd_uniform(&cost, n, n).unwrap()));
        if n <= 128 {
            let opts = SinkhornOptions::default();
            g.bench_function(format!("sinkhorn {n}x{n} (defaults)"), |bch| {
                bch.iter(|| sinkhorn(&a, &b, DIM, &opts).unwrap())
            });
        }
    }
    let (a, b) = (cloud(&mut rng, 20), cloud(&mut rng, 33));
    g.bench_function("exact 20x33", |bch| bch.iter(|| wmd(&a, &b, DIM).unwrap()));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

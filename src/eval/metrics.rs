//! Correlations and retrieval metrics.

/// Pearson correlation. Deviations from the mean beyond 1e100 or below 1e-100 are divided by
/// their largest magnitude first, which leaves the correlation as it is (scores near 1e300
/// overflowed the sums of squares and the correlation came out 0); other inputs are computed as
/// before, to the bit.
pub fn pearson(x: &[f64], y: &[f64]) -> f64 {
    assert_eq!(x.len(), y.len());
    let n = x.len() as f64;
    // A sum of scores near f64's largest overflows where their mean does not.
    let mean = |v: &[f64]| {
        let s = v.iter().sum::<f64>();
        if s.is_infinite() && v.iter().all(|a| a.is_finite()) {
            v.iter().map(|a| a / n).sum::<f64>()
        } else {
            s / n
        }
    };
    let (mx, my) = (mean(x), mean(y));
    let sums = |kx: f64, ky: f64| {
        let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
        for (a, b) in x.iter().zip(y) {
            let (da, db) = ((a - mx) / kx, (b - my) / ky);
            sxy += da * db;
            sxx += da * da;
            syy += db * db;
        }
        (sxy, sxx, syy)
    };
    // Deviations whose squares and products stay far inside f64's range are summed as they are
    // (constant scores too: NaN, as before); others are rescaled by their largest magnitude.
    let largest = |v: &[f64], m: f64| v.iter().fold(0.0f64, |s, a| s.max((a - m).abs()));
    let (kx, ky) = (largest(x, mx), largest(y, my));
    let plain = |k: f64| k == 0.0 || (1e-100..=1e100).contains(&k) || !k.is_finite();
    if plain(kx) && plain(ky) {
        let (sxy, sxx, syy) = sums(1.0, 1.0);
        return sxy / (sxx * syy).sqrt();
    }
    let (sxy, sxx, syy) = sums(kx, ky);
    sxy / (sxx.sqrt() * syy.sqrt())
}

/// 1-based ranks, ties given their average rank (as scipy.stats.rankdata).
pub fn average_ranks(x: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut ranks = vec![0.0; x.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && x[idx[j + 1]] == x[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for k in i..=j {
            ranks[idx[k]] = avg;
        }
        i = j + 1;
    }
    ranks
}

/// Spearman rank correlation with average ranks for ties.
pub fn spearman(x: &[f64], y: &[f64]) -> f64 {
    pearson(&average_ranks(x), &average_ranks(y))
}

/// Cosine similarity.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut d, mut na, mut nb) = (0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        d += *x as f64 * *y as f64;
        na += *x as f64 * *x as f64;
        nb += *y as f64 * *y as f64;
    }
    d / (na.sqrt() * nb.sqrt()).max(1e-12)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_with_ties() {
        // scipy.stats.rankdata([10, 20, 10, 30, 20, 20]) = [1.5, 4, 1.5, 6, 4, 4]
        assert_eq!(average_ranks(&[10.0, 20.0, 10.0, 30.0, 20.0, 20.0]), vec![1.5, 4.0, 1.5, 6.0, 4.0, 4.0]);
    }

    #[test]
    fn correlations_against_scipy() {
        let x = [1.0, 2.0, 2.0, 4.0, 5.0, 7.0];
        let y = [2.0, 1.0, 4.0, 3.0, 7.0, 7.0];
        // By hand: mean x = 3.5, mean y = 4; sxy = 24, sxx = 25.5, syy = 32 -> 24/sqrt(816) = 0.840168...
        assert!((pearson(&x, &y) - 24.0 / 816f64.sqrt()).abs() < 1e-12);
        // ranks x = [1, 2.5, 2.5, 4, 5, 6], ranks y = [2, 1, 4, 3, 5.5, 5.5] (ties averaged);
        // sxy = 13.5, sxx = 17, syy = 17 -> 13.5/17 = 0.794117... (scipy.stats.spearmanr gives the same)
        assert!((spearman(&x, &y) - 13.5 / 17.0).abs() < 1e-12);
        assert!((spearman(&x, &x) - 1.0).abs() < 1e-12);
        let rev: Vec<f64> = x.iter().map(|v| -v).collect();
        assert!((spearman(&x, &rev) + 1.0).abs() < 1e-12);
    }

    /// Scores near the ends of f64's range give the correlation of the same scores rescaled
    /// (before, 1e300 overflowed and Pearson came out -0.00 where it is -5.50).
    #[test]
    fn pearson_of_huge_or_tiny_values() {
        let x = [1.0, 2.0, 2.0, 4.0, 5.0, 7.0];
        let y = [2.0, 1.0, 4.0, 3.0, 7.0, 7.0];
        let want = pearson(&x, &y);
        for k in [1e300, 1e-200, 1e150] {
            let big: Vec<f64> = y.iter().map(|v| v * k).collect();
            assert!((pearson(&x, &big) - want).abs() < 1e-12, "{k}: {}", pearson(&x, &big));
            let both: Vec<f64> = x.iter().map(|v| v * k).collect();
            assert!((pearson(&both, &big) - want).abs() < 1e-12, "{k}: {}", pearson(&both, &big));
        }
        // One outlier on a 0..5 scale, as the probe's damaged gold file.
        let mut out = y;
        out[2] = 1e300;
        assert!(pearson(&x, &out).is_finite() && pearson(&x, &out).abs() > 1e-3);
        // Scores whose sum overflows (the audit's gold file: 1.7e308 twice): their mean does not.
        let huge: Vec<f64> = y.iter().map(|v| v * 2.4e307).collect();
        assert!((pearson(&x, &huge) - want).abs() < 1e-12, "{}", pearson(&x, &huge));
    }

    #[test]
    fn cosine_basics() {
        assert!((cosine(&[1.0, 0.0], &[0.0, 1.0])).abs() < 1e-12);
        assert!((cosine(&[1.0, 1.0], &[2.0, 2.0]) - 1.0).abs() < 1e-12);
    }
}

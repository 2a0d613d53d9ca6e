//! Closed-form linear maps between two embedding spaces: ridge least squares
//! ([`fit_affine`]) and orthogonal Procrustes ([`fit_orthogonal`]), used to initialise a
//! projection layer.

use anyhow::{bail, Context, Result};

/// Ridge least squares: the affine map `y ≈ W x + b` (W `[out, in]`, row-major) that best
/// predicts rows of `y` from rows of `x`, with penalty `ridge · mean(diag XᵀX)` on W.
pub fn fit_affine(x: &[Vec<f32>], y: &[Vec<f32>], ridge: f64) -> Result<(Vec<f32>, Vec<f32>)> {
    use nalgebra::DMatrix;
    let n = x.len();
    if n == 0 || n != y.len() {
        bail!("least-squares fit needs as many (non-zero) inputs as targets: {} vs {}", n, y.len());
    }
    let (din, dout) = (x[0].len(), y[0].len());
    let xa = DMatrix::<f64>::from_fn(n, din + 1, |i, j| if j < din { x[i][j] as f64 } else { 1.0 });
    let ym = DMatrix::<f64>::from_fn(n, dout, |i, j| y[i][j] as f64);
    let mut xtx = xa.transpose() * &xa;
    let lambda = ridge * (0..din).map(|i| xtx[(i, i)]).sum::<f64>() / din.max(1) as f64;
    for i in 0..din {
        xtx[(i, i)] += lambda;
    }
    let xty = xa.transpose() * ym;
    let chol = xtx
        .cholesky()
        .context("least-squares fit: the normal equations are singular (too few or repeated sentences?)")?;
    let a = chol.solve(&xty); // [din + 1, dout]
    let mut w = vec![0f32; dout * din];
    for o in 0..dout {
        for i in 0..din {
            w[o * din + i] = a[(i, o)] as f32;
        }
    }
    let b = (0..dout).map(|o| a[(din, o)] as f32).collect();
    Ok((w, b))
}

/// Orthogonal Procrustes: the map `y ≈ W x̂` (W `[out, in]`, row-major, no bias) with orthonormal
/// rows or columns that best aligns the L2-normalised rows of `x` with the rows of `y`:
/// `W = U Vᵀ` from the SVD `Σ yᵢ x̂ᵢᵀ = U Σ Vᵀ`. When `out ≥ in`, W preserves lengths and angles,
/// so a normalised student keeps exactly its own cosines at the start.
pub fn fit_orthogonal(x: &[Vec<f32>], y: &[Vec<f32>]) -> Result<Vec<f32>> {
    use nalgebra::DMatrix;
    let n = x.len();
    if n == 0 || n != y.len() {
        bail!("Procrustes fit needs as many (non-zero) inputs as targets: {} vs {}", n, y.len());
    }
    let (din, dout) = (x[0].len(), y[0].len());
    let norms: Vec<f64> =
        x.iter().map(|r| r.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt().max(1e-12)).collect();
    let xn = DMatrix::<f64>::from_fn(n, din, |i, j| x[i][j] as f64 / norms[i]);
    let ym = DMatrix::<f64>::from_fn(n, dout, |i, j| y[i][j] as f64);
    let svd = (ym.transpose() * xn).svd(true, true); // Σ yᵢ x̂ᵢᵀ, [dout, din]
    let (u, vt) = (svd.u.context("Procrustes fit: SVD gave no U")?, svd.v_t.context("Procrustes fit: SVD gave no Vᵀ")?);
    // W = U Vᵀ, row-major: nalgebra stores column-major, so read Wᵀ.
    Ok((u * vt).transpose().iter().map(|v| *v as f32).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::encoder::Rng;
    use rand::SeedableRng;

    #[test]
    fn affine_fit_recovers_a_known_map() {
        let mut rng = Rng::seed_from_u64(1);
        use rand::Rng as _;
        let x: Vec<Vec<f32>> = (0..200).map(|_| (0..5).map(|_| rng.random_range(-1.0..1.0)).collect()).collect();
        let w = [[1.0, 2.0, 0.0, -1.0, 0.5], [0.0, 0.0, 3.0, 0.0, 0.0], [-2.0, 0.0, 0.0, 0.0, 1.0]];
        let b = [0.5, -1.0, 2.0];
        let y: Vec<Vec<f32>> =
            x.iter().map(|r| (0..3).map(|o| (0..5).map(|i| w[o][i] * r[i]).sum::<f32>() + b[o]).collect()).collect();
        let (fw, fb) = fit_affine(&x, &y, 0.0).unwrap();
        for o in 0..3 {
            assert!((fb[o] - b[o]).abs() < 1e-4, "bias {o}: {} vs {}", fb[o], b[o]);
            for i in 0..5 {
                assert!((fw[o * 5 + i] - w[o][i]).abs() < 1e-4);
            }
        }
    }

    #[test]
    fn orthogonal_fit_recovers_a_rotation_and_is_orthogonal() {
        let mut rng = Rng::seed_from_u64(2);
        use rand::Rng as _;
        let d = 6;
        // A rotation from the QR of a random matrix.
        let a = nalgebra::DMatrix::<f64>::from_fn(d, d, |_, _| rng.random_range(-1.0..1.0));
        let q = a.qr().q();
        let x: Vec<Vec<f32>> = (0..100).map(|_| (0..d).map(|_| rng.random_range(-1.0..1.0)).collect()).collect();
        // Targets: the rotated unit vectors, plus noise that must not break orthogonality.
        let y: Vec<Vec<f32>> = x
            .iter()
            .map(|r| {
                let n = r.iter().map(|v| v * v).sum::<f32>().sqrt();
                (0..d)
                    .map(|o| (0..d).map(|i| q[(o, i)] as f32 * r[i] / n).sum::<f32>() + rng.random_range(-0.01..0.01))
                    .collect()
            })
            .collect();
        let w = fit_orthogonal(&x, &y).unwrap();
        for o in 0..d {
            for i in 0..d {
                assert!((w[o * d + i] - q[(o, i)] as f32).abs() < 0.02, "W[{o},{i}] {} vs {}", w[o * d + i], q[(o, i)]);
                let dot: f32 = (0..d).map(|k| w[o * d + k] * w[i * d + k]).sum();
                assert!((dot - if o == i { 1.0 } else { 0.0 }).abs() < 1e-5, "rows {o},{i} dot {dot}");
            }
        }
        assert!(fit_orthogonal(&x, &y[..3]).is_err());
    }
}

//! The patched candle-core (vendor/README.md): a tensor's first gradient is stored as it is, later
//! ones added. Checked against gradients written out by hand for the rules the patch touches:
//! a first gradient that is negated (`Sub`'s right side, `Neg`, `Recip`, `Tanh`, `Cos`), fan-in
//! (one tensor used several times), a broadcast, a view (`narrow`, `transpose`), and that every
//! stored gradient is contiguous.

use anyhow::Result;
use candle_core::{Device, Tensor, Var};

fn close(a: &Tensor, want: &[f32]) -> Result<()> {
    let got = a.flatten_all()?.to_vec1::<f32>()?;
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "got {got:?}, want {want:?}");
    }
    Ok(())
}

#[test]
fn first_gradients_keep_their_sign_and_later_ones_add() -> Result<()> {
    let dev = Device::Cpu;
    let xs = [0.5f32, -1.5, 2.0];
    let x = Var::new(&xs, &dev)?;
    let y = Var::new(&[3f32, 1.0, -2.0], &dev)?;
    // f = Σ (y − x) + Σ −x·x + Σ 1/y + Σ tanh(x) + Σ cos(y): x reaches f four times, y three.
    let f = ((y.as_tensor() - x.as_tensor())?.sum_all()?
        + x.as_tensor().neg()?.mul(x.as_tensor())?.sum_all()?
        + y.as_tensor().recip()?.sum_all()?
        + x.as_tensor().tanh()?.sum_all()?
        + y.as_tensor().cos()?.sum_all()?)?;
    let g = f.backward()?;
    let dx: Vec<f32> = xs.iter().map(|&v| -1.0 - 2.0 * v + (1.0 - v.tanh().powi(2))).collect();
    let dy: Vec<f32> = [3f32, 1.0, -2.0].iter().map(|&v| 1.0 - 1.0 / (v * v) - v.sin()).collect();
    close(g.get(x.as_tensor()).expect("x has a gradient"), &dx)?;
    close(g.get(y.as_tensor()).expect("y has a gradient"), &dy)?;
    Ok(())
}

#[test]
fn views_and_broadcasts_get_contiguous_gradients() -> Result<()> {
    let dev = Device::Cpu;
    let m = Var::from_vec((0..6).map(|i| i as f32).collect::<Vec<_>>(), (2, 3), &dev)?;
    let b = Var::new(&[1f32, 2.0, 3.0], &dev)?;
    // A transposed view, a column slice and a broadcast row.
    let t = m.as_tensor().t()?; // [3, 2]
    let s = m.as_tensor().narrow(1, 1, 2)?; // [2, 2]
    let w = Tensor::new(&[[1f32, 10.0], [100.0, 1000.0], [0.5, 0.25]], &dev)?;
    let f = ((t * &w)?.sum_all()? + s.sum_all()? + m.as_tensor().broadcast_add(b.as_tensor())?.sqr()?.sum_all()?)?;
    let g = f.backward()?;
    let (gm, gb) = (g.get(m.as_tensor()).expect("m"), g.get(b.as_tensor()).expect("b"));
    assert!(gm.is_contiguous() && gb.is_contiguous());
    // d/dm: wᵀ from the transposed view, 1 on columns 1..3 from the slice, 2(m + b) from the square.
    let mv: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let wt = [1f32, 100.0, 0.5, 10.0, 1000.0, 0.25];
    let want_m: Vec<f32> =
        (0..6).map(|i| wt[i] + if i % 3 > 0 { 1.0 } else { 0.0 } + 2.0 * (mv[i] + (i % 3 + 1) as f32)).collect();
    close(gm, &want_m)?;
    let want_b: Vec<f32> = (0..3).map(|j| 2.0 * (mv[j] + mv[j + 3] + 2.0 * (j + 1) as f32)).collect();
    close(gb, &want_b)?;
    Ok(())
}

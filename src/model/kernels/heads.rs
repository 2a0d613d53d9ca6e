//! Attention's head split and merge, with the query's scale folded into the split.

use anyhow::Result;
use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};
use half::bf16;

use super::fused_f32_or_bf16;

/// Attention's head split, `[B·L, heads·d]` → `[B, heads, L, d]` (contiguous), or its inverse
/// (`merge`), each value times `scale` where given (as candle's `affine(scale, 0)` would compute
/// it, factor rounded to the dtype, before the split or after the merge: the same bits); the
/// backward of each is the other with the same scale. The input may have any layout (it is read
/// through its strides: a column slice, a transposed view; the gradients candle stores are
/// contiguous, but a view is read as it is, not copied first). f32 or bf16, on the CPU
/// or (src/gpu/heads.cu) a GPU.
#[derive(Clone, Copy)]
struct Heads {
    b: usize,
    l: usize,
    heads: usize,
    merge: bool,
    scale: Option<f64>,
}

impl Heads {
    /// `d`, and the output's shape, for an input of `dims`; an error unless `dims` is the input
    /// this op expects.
    fn shapes(&self, dims: &[usize]) -> candle_core::Result<(usize, Shape)> {
        let (b, len, nh) = (self.b, self.l, self.heads);
        let d = match (self.merge, dims) {
            (true, &[.., d]) => d,
            (false, &[_, w]) if nh > 0 => w / nh,
            _ => 0,
        };
        let (want, out) = if self.merge {
            ([b, nh, len, d].to_vec(), Shape::from((b * len, nh * d)))
        } else {
            ([b * len, nh * d].to_vec(), Shape::from((b, nh, len, d)))
        };
        if dims != want.as_slice() || nh == 0 {
            candle_core::bail!("{}: shape {dims:?} for {b} × {len} tokens and {nh} heads", self.name());
        }
        Ok((d, out))
    }

    /// The input's strides in elements per sequence, head, token and element of a head
    /// (`[sb, sh, st, se]`; any layout), for an input of [`Self::shapes`]' dims
    /// ([`crate::gpu::launch::heads_strides`]: the rule the CUDA emulation's tests use too).
    fn strides(&self, l: &Layout, d: usize) -> candle_core::Result<[usize; 4]> {
        match crate::gpu::launch::heads_strides(self.merge, self.l, d, l.stride()) {
            Some(s) => Ok(s),
            None => {
                candle_core::bail!("{}: strides {:?} for an input of shape {:?}", self.name(), l.stride(), l.dims())
            }
        }
    }

    /// The output (split: [B, heads, L, d], merge: [B·L, heads·d] = [B, L, heads, d]) gathered from
    /// `x` (from the layout's start, `strides` as [`Self::strides`]), each value passed through `f`:
    /// runs of `d` where a head's elements are adjacent, else element by element. No zeroed
    /// buffer first.
    fn permute<T: Copy>(&self, x: &[T], strides: [usize; 4], d: usize, f: impl Fn(T) -> T) -> Vec<T> {
        let (b, len, nh) = (self.b, self.l, self.heads);
        let [sb, sh, st, se] = strides;
        let mut out = Vec::with_capacity(b * len * nh * d);
        let (outer, inner) = if self.merge { (len, nh) } else { (nh, len) };
        for bi in 0..b {
            for i in 0..outer {
                for j in 0..inner {
                    let (h, t) = if self.merge { (j, i) } else { (i, j) };
                    let from = bi * sb + h * sh + t * st;
                    if se == 1 {
                        out.extend(x[from..from + d].iter().map(|&v| f(v)));
                    } else {
                        out.extend((0..d).map(|e| f(x[from + e * se])));
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
thread_local! {
    /// How many times [`Heads`] ran on the CPU on this thread (tests: the fallback gives the
    /// same bits, so only a count tells that the op ran).
    static RUNS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl CustomOp1 for Heads {
    fn name(&self) -> &'static str {
        if self.merge {
            "fast-merge-heads"
        } else {
            "fast-split-heads"
        }
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (d, shape) = self.shapes(l.dims())?;
        let (at, strides) = (l.start_offset(), self.strides(l, d)?);
        // `v · scale + 0` as candle's affine op on the CPU: the factor in the dtype, the product
        // rounded to the dtype, then `+ 0` (−0 becomes 0).
        let out = match (s, self.scale) {
            (CpuStorage::F32(x), None) => CpuStorage::F32(self.permute(&x[at..], strides, d, |v| v)),
            (CpuStorage::F32(x), Some(s)) => {
                let s = crate::gpu::launch::heads_factor(candle_core::DType::F32, s);
                CpuStorage::F32(self.permute(&x[at..], strides, d, |v| v * s + 0.0))
            }
            (CpuStorage::BF16(x), None) => CpuStorage::BF16(self.permute(&x[at..], strides, d, |v| v)),
            (CpuStorage::BF16(x), Some(s)) => {
                let s = crate::gpu::launch::heads_factor(candle_core::DType::BF16, s);
                // half's bf16 `*` then `+`: each rounds (the product of two bf16 values is exact in
                // f32, so the first rounding is the only one; the second turns −0 into 0).
                let affine = |v: bf16| bf16::from_f32(bf16::from_f32(v.to_f32() * s).to_f32() + 0.0);
                CpuStorage::BF16(self.permute(&x[at..], strides, d, affine))
            }
            _ => candle_core::bail!("{}: f32 or bf16 only", self.name()),
        };
        #[cfg(test)]
        RUNS.with(|c| c.set(c.get() + 1));
        Ok((out, shape))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::backend::BackendStorage;
        let (d, shape) = self.shapes(l.dims())?;
        let scale = self.scale.map(|f| crate::gpu::launch::heads_factor(s.dtype(), f));
        let dims = [self.b, self.heads, self.l, d];
        crate::gpu::heads::forward((s, l), &shape, dims, self.strides(l, d)?, self.merge, scale)
    }

    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        // The gradient as it comes (contiguous, as candle stores gradients, or a view: read
        // through its strides).
        let inverse = Heads { merge: !self.merge, ..*self };
        Ok(Some(grad.apply_op1_no_bwd(&inverse)?))
    }
}

/// Whether [`Heads`] runs on `x`: f32 or bf16 on the CPU or a GPU, unless
/// `XSENT_KERNELS=candle`.
fn op_runs(x: &Tensor) -> bool {
    fused_f32_or_bf16(&[x])
}

/// `[B·L, heads·d]` → `[B, heads, L, d]` (contiguous), as attention splits its projections; with
/// `scale`, each value times it (the query's `1/√d`: the same bits as `x · scale` first).
pub fn split_heads(x: &Tensor, b: usize, l: usize, heads: usize, scale: Option<f64>) -> Result<Tensor> {
    if op_runs(x) {
        return Ok(x.apply_op1(Heads { b, l, heads, merge: false, scale })?);
    }
    let x = match scale {
        Some(s) => (x * s)?,
        None => x.clone(),
    };
    let d = x.dim(1)? / heads;
    Ok(x.reshape((b, l, heads, d))?.transpose(1, 2)?.contiguous()?)
}

/// `[B, heads, L, d]` → `[B·L, heads·d]`, the inverse of [`split_heads`].
pub fn merge_heads(x: &Tensor) -> Result<Tensor> {
    let (b, heads, l, d) = x.dims4()?;
    if op_runs(x) {
        Ok(x.apply_op1(Heads { b, l, heads, merge: true, scale: None })?)
    } else {
        Ok(x.transpose(1, 2)?.reshape((b * l, heads * d))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::kernels::with_candle_ops;
    use candle_core::{DType, Device, Var};

    /// Each value's bits (bf16 widened exactly): −0 and 0 differ.
    fn bits(t: &Tensor) -> Vec<u32> {
        let v = t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Split (scaled or not) and merge, values and gradients, against candle's ops (`x · s`, a
    /// reshape, a transpose and a copy), bit for bit in f32 and bf16, with zeros of both signs
    /// and products that underflow to −0 (candle's `+ 0` makes them 0; in bf16 after the product's
    /// rounding); the op ran each time.
    #[test]
    fn split_and_merge_equal_candles_ops_bit_for_bit() -> Result<()> {
        let dev = Device::Cpu;
        let (b, l, nh, d) = (2, 3, 4, 5);
        let n = b * l * nh * d;
        let vals: Vec<f32> = (0..n)
            .map(|i| match i % 11 {
                0 => -0.0,
                1 => -1e-45,
                2 => 0.0,
                // bf16's smallest negative value: times a factor below 1/2 it rounds to −0 in bf16
                // (then candle's `+ 0` makes it 0); in f32 the product stays a small negative.
                3 => f32::from_bits(0x8001_0000),
                _ => ((i * 7919) % 211) as f32 / 13.0 - 8.0,
            })
            .collect();
        let w: Vec<f32> = (0..n).map(|i| ((i * 104_729) % 97) as f32 / 48.0 - 1.0).collect();
        for dt in [DType::F32, DType::BF16] {
            let x = Tensor::from_vec(vals.clone(), (b * l, nh * d), &dev)?.to_dtype(dt)?;
            let w = Tensor::from_vec(w.clone(), (b, nh, l, d), &dev)?.to_dtype(dt)?;
            for scale in [None, Some(1.0 / (d as f64).sqrt()), Some(1.0 / 32f64.sqrt())] {
                let what = format!("{dt:?}, scale {scale:?}");
                let run = |candle: bool| -> Result<(Tensor, Tensor, Tensor)> {
                    let v = Var::from_tensor(&x)?;
                    let f = || -> Result<(Tensor, Tensor)> {
                        let s = split_heads(v.as_tensor(), b, l, nh, scale)?;
                        Ok((s.clone(), merge_heads(&s.mul(&w)?)?))
                    };
                    let (s, m) = if candle { with_candle_ops(f)? } else { f()? };
                    let g = m.sum_all()?.backward()?;
                    Ok((s, m, g.get(v.as_tensor()).expect("a gradient").clone()))
                };
                let before = RUNS.with(|c| c.get());
                let ours = run(false)?;
                // Forward: the split and the merge; backward: the merge's and the split's inverses.
                assert_eq!(RUNS.with(|c| c.get()) - before, 4, "{what}: the op did not run");
                let theirs = run(true)?;
                assert_eq!(RUNS.with(|c| c.get()) - before, 4, "{what}: candle's path ran the op");
                assert_eq!(ours.0.dims(), &[b, nh, l, d]);
                assert_eq!(bits(&ours.0), bits(&theirs.0), "{what}: split");
                assert_eq!(bits(&ours.1), bits(&theirs.1), "{what}: merge");
                assert_eq!(bits(&ours.2), bits(&theirs.2), "{what}: gradient");
            }
        }
        // Strided inputs: a merge of a transposed view, a split of a column slice, and the key's
        // path (`q·kᵀ`, a transposed view's gradient on the way to the split), against the same
        // on contiguous copies and candle's ops.
        for dt in [DType::F32, DType::BF16] {
            let z = Tensor::from_vec(vals.clone(), (b, nh, d, l), &dev)?.to_dtype(dt)?;
            let zt = z.t()?;
            assert!(!zt.is_contiguous());
            let want = with_candle_ops(|| merge_heads(&zt))?;
            assert_eq!(bits(&merge_heads(&zt)?), bits(&want), "{dt:?}: merge of a transposed view");
            let twice: Vec<f32> = vals.iter().chain(&vals).copied().collect();
            let wide = Tensor::from_vec(twice, (b * l, nh * d * 2), &dev)?.to_dtype(dt)?.narrow(1, 3, nh * d)?;
            assert!(!wide.is_contiguous());
            let scale = Some(0.25);
            let want = with_candle_ops(|| split_heads(&wide, b, l, nh, scale))?;
            assert_eq!(bits(&split_heads(&wide, b, l, nh, scale)?), bits(&want), "{dt:?}: split of a column slice");
            let x = Tensor::from_vec(vals.clone(), (b * l, nh * d), &dev)?.to_dtype(dt)?;
            let w =
                Tensor::from_vec(vals.iter().rev().copied().collect::<Vec<_>>(), (b, nh, l, d), &dev)?.to_dtype(dt)?;
            // A split whose columns are not adjacent (a transposed matrix): element by element.
            let cols = Tensor::from_vec(vals.clone(), (nh * d, b * l), &dev)?.to_dtype(dt)?.t()?;
            let want = with_candle_ops(|| split_heads(&cols, b, l, nh, scale))?;
            assert_eq!(bits(&split_heads(&cols, b, l, nh, scale)?), bits(&want), "{dt:?}: split of a transpose");
            let key_grad = |candle: bool| -> Result<Vec<u32>> {
                let v = Var::from_tensor(&x)?;
                let f = || -> Result<Tensor> {
                    let k = split_heads(v.as_tensor(), b, l, nh, None)?;
                    Ok(w.matmul(&k.t()?)?)
                };
                let y = if candle { with_candle_ops(f)? } else { f()? };
                let g = y.to_dtype(DType::F32)?.sum_all()?.backward()?;
                Ok(bits(g.get(v.as_tensor()).expect("a gradient")))
            };
            assert_eq!(key_grad(false)?, key_grad(true)?, "{dt:?}: the key's gradient");
        }
        // A −0 product is 0, as in candle's affine op (the `+ 0`).
        let x = Tensor::from_vec(vec![-0.0f32, -1e-45, 2.0, -3.0], (1, 4), &dev)?;
        let s = split_heads(&x, 1, 1, 2, Some(0.5))?;
        assert_eq!(bits(&s), [0, 0, 1f32.to_bits(), (-1.5f32).to_bits()]);
        // In bf16 the product is rounded first: bf16's smallest negative value times 1/8 is −0
        // there, and the `+ 0` after it makes it 0, as candle's affine op does.
        let x = Tensor::from_vec(vec![bf16::from_bits(0x8001), bf16::from_f32(-3.0)], (1, 2), &dev)?;
        let s = split_heads(&x, 1, 1, 1, Some(0.125))?;
        assert_eq!(bits(&s), [0, (-0.375f32).to_bits()]);
        assert_eq!(bits(&s), bits(&(x * 0.125)?));
        Ok(())
    }
}

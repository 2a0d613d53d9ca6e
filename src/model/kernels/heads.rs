//! Attention's head split and merge.

use anyhow::Result;
use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};

use super::{cpu_f32, one_f32};

/// Attention's head split, `[B·L, heads·d]` → `[B, heads, L, d]` (contiguous), or its inverse
/// (`merge`); the backward of each is the other.
struct Heads {
    b: usize,
    l: usize,
    heads: usize,
    merge: bool,
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
        let x = one_f32(self.name(), s, l)?;
        let (b, len, nh) = (self.b, self.l, self.heads);
        let d = match (self.merge, l.dims()) {
            (true, &[.., d]) => d,
            (false, &[_, w]) if nh > 0 => w / nh,
            _ => 0,
        };
        let (want, out_shape) = if self.merge {
            ([b, nh, len, d].to_vec(), Shape::from((b * len, nh * d)))
        } else {
            ([b * len, nh * d].to_vec(), Shape::from((b, nh, len, d)))
        };
        if l.dims() != want.as_slice() || nh == 0 {
            candle_core::bail!("{}: shape {:?} for {b} × {len} tokens and {nh} heads", self.name(), l.dims());
        }
        // Rows of `d` appended in the output's order (no zeroed buffer first): split writes
        // [B, heads, L, d] (head, then token), merge [B·L, heads·d] (token, then head).
        let mut out = Vec::with_capacity(x.len());
        let (outer, inner) = if self.merge { (len, nh) } else { (nh, len) };
        for bi in 0..b {
            for i in 0..outer {
                for j in 0..inner {
                    let from = if self.merge {
                        ((bi * nh + j) * len + i) * d // head j, token i of [B, heads, L, d]
                    } else {
                        (bi * len + j) * nh * d + i * d // token j, head i of [B·L, heads·d]
                    };
                    out.extend_from_slice(&x[from..from + d]);
                }
            }
        }
        Ok((CpuStorage::F32(out), out_shape))
    }

    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let inverse = Heads { merge: !self.merge, ..*self };
        Ok(Some(grad.contiguous()?.apply_op1_no_bwd(&inverse)?))
    }
}

/// `[B·L, heads·d]` → `[B, heads, L, d]` (contiguous), as attention splits its projections.
pub fn split_heads(x: &Tensor, b: usize, l: usize, heads: usize) -> Result<Tensor> {
    if cpu_f32(&[x]) {
        Ok(x.contiguous()?.apply_op1(Heads { b, l, heads, merge: false })?)
    } else {
        let d = x.dim(1)? / heads;
        Ok(x.reshape((b, l, heads, d))?.transpose(1, 2)?.contiguous()?)
    }
}

/// `[B, heads, L, d]` → `[B·L, heads·d]`, the inverse of [`split_heads`].
pub fn merge_heads(x: &Tensor) -> Result<Tensor> {
    let (b, heads, l, d) = x.dims4()?;
    if cpu_f32(&[x]) {
        Ok(x.contiguous()?.apply_op1(Heads { b, l, heads, merge: true })?)
    } else {
        Ok(x.transpose(1, 2)?.reshape((b * l, heads * d))?)
    }
}

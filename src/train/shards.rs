//! The gradient engine of one micro-batch: its shards' forward and backward on
//! [`crate::threads::threads`] workers (separable losses, [`run_shards`], or coupled ones through
//! a gradient cache, [`run_coupled`]), gradients summed in shard order so that the result does
//! not depend on the number of threads.

use super::recipe::{Recipe, StepLoss};
use crate::model::encoder::{Rng, RowLookup, TrainContext};
use crate::model::weights::Params;
use anyhow::Result;
use candle_core::backprop::GradStore;
use candle_core::Tensor;
use rand::SeedableRng;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Add named loss terms into a running list, keeping first-seen order.
pub(crate) fn add_terms(into: &mut Vec<(String, f64)>, terms: Vec<(String, f64)>) {
    for (k, v) in terms {
        match into.iter_mut().find(|(n, _)| *n == k) {
            Some(slot) => slot.1 += v,
            None => into.push((k, v)),
        }
    }
}

/// A recipe's loss terms: those it left as tensors read now (first), then the others.
pub(crate) fn read_terms(later: Vec<(String, Tensor)>, terms: Vec<(String, f64)>) -> Result<Vec<(String, f64)>> {
    let mut out = Vec::with_capacity(later.len() + terms.len());
    for (k, t) in later {
        out.push((k, t.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?));
    }
    out.extend(terms);
    Ok(out)
}

/// What the shards of one micro-batch gave.
pub struct MicroBatch {
    pub grads: GradStore,
    pub loss: f64,
    pub terms: Vec<(String, f64)>,
    pub sentences: usize,
    /// The first non-finite shard loss and its terms.
    pub non_finite: Option<(f64, Vec<(String, f64)>)>,
    /// Thread-seconds in the recipe's loss (forward) and in backward.
    pub forward_s: f64,
    pub backward_s: f64,
}

/// Forward and backward of each shard (on [`crate::threads::threads`] workers), with `mega` the
/// examples of the micro-batch's mega-batch (see [`Recipe::loss_in_megabatch`]), each shard's
/// loss weighted by its share of the batch and by `1 / grad_accum`; gradients summed in shard
/// order, so the result does not depend on the number of threads.
pub fn run_shards(
    recipe: &dyn Recipe,
    shards: &[&[usize]],
    mega: &[usize],
    seeds: &[u64],
    batch_len: usize,
    accum: usize,
    params: &Params,
) -> Result<MicroBatch> {
    struct Done {
        grads: Option<GradStore>,
        rows: RowGrads,
        loss: f64,
        terms: Vec<(String, f64)>,
        sentences: usize,
        fwd: f64,
        bwd: f64,
    }
    /// A shard's result: its gradients, or the non-finite loss and terms it gave.
    type Shard = Result<std::result::Result<Done, (f64, Vec<(String, f64)>)>>;
    let one = |i: usize| -> Shard {
        let mut ctx = TrainContext::recording(Rng::seed_from_u64(seeds[i]));
        let t0 = Instant::now();
        let l = recipe.loss_in_megabatch(shards[i], mega, &mut ctx)?;
        let lookups = ctx.take_lookups();
        let fwd = t0.elapsed().as_secs_f64();
        let w = shards[i].len() as f64 / batch_len as f64 / accum as f64;
        let t1 = Instant::now();
        // The loss and its terms are read once the backward is queued: on a GPU, one wait
        // fewer before it. A non-finite loss discards the gradients.
        let scaled = if w != 1.0 { (&l.total * w)? } else { l.total.clone() };
        let mut grads = scaled.backward()?;
        let value = l.total.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
        let terms = read_terms(l.later, l.terms)?;
        if !value.is_finite() {
            return Ok(Err((value, terms)));
        }
        let rows = take_row_grads(&mut grads, &lookups)?;
        let terms = terms.into_iter().map(|(k, v)| (k, v * w)).collect();
        Ok(Ok(Done {
            grads: Some(grads),
            rows,
            loss: value * w,
            terms,
            sentences: l.sentences,
            fwd,
            bwd: t1.elapsed().as_secs_f64(),
        }))
    };
    let n = shards.len();
    // Shards are folded into the running sum in shard order as they finish, so at most a few
    // shards' gradients are alive at once.
    struct Fold {
        next: usize,
        pending: std::collections::BTreeMap<usize, Shard>,
        out: MicroBatch,
        acc: Option<GradStore>,
        tables: TableGrads,
        error: Option<anyhow::Error>,
    }
    let fold = std::sync::Mutex::new(Fold {
        next: 0,
        pending: Default::default(),
        out: MicroBatch {
            grads: GradStore::default(),
            loss: 0.0,
            terms: Vec::new(),
            sentences: 0,
            non_finite: None,
            forward_s: 0.0,
            backward_s: 0.0,
        },
        acc: None,
        tables: TableGrads::default(),
        error: None,
    });
    let finish = |i: usize, r: Shard| {
        let mut f = fold.lock().expect("no worker panicked");
        f.pending.insert(i, r);
        loop {
            let next = f.next;
            let Some(r) = f.pending.remove(&next) else { break };
            f.next += 1;
            match r {
                Err(e) => {
                    f.error.get_or_insert(e);
                }
                Ok(Err(bad)) => {
                    f.out.non_finite.get_or_insert(bad);
                }
                Ok(Ok(mut d)) => {
                    f.out.loss += d.loss;
                    add_terms(&mut f.out.terms, d.terms);
                    f.out.sentences += d.sentences;
                    f.out.forward_s += d.fwd;
                    f.out.backward_s += d.bwd;
                    let g = d.grads.take().expect("set above");
                    let acc = f.acc.take();
                    match add_grads(acc, g, params) {
                        Ok(sum) => f.acc = Some(sum),
                        Err(e) => {
                            f.error.get_or_insert(e);
                        }
                    }
                    f.tables.add(std::mem::take(&mut d.rows));
                }
            }
        }
    };
    par_for(n, |i| finish(i, one(i)));
    let Fold { mut out, acc, tables, error, .. } = fold.into_inner().expect("no worker panicked");
    if let Some(e) = error {
        return Err(e);
    }
    if let Some(a) = acc {
        out.grads = a;
    }
    tables.into_store(&mut out.grads)?;
    Ok(out)
}

/// `f(i)` for `i` in `0..n`, on [`crate::threads::threads`] workers taking the next index as
/// they finish (on the calling thread when there is one worker).
pub(crate) fn par_for(n: usize, f: impl Fn(usize) + Sync) {
    let workers = crate::threads::threads().min(n).max(1);
    if workers == 1 {
        (0..n).for_each(f);
        return;
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                f(i);
            });
        }
    });
}

/// `f(0..n)` with [`par_for`], results in index order.
pub(crate) fn par_map<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let slots: Vec<std::sync::Mutex<Option<T>>> = (0..n).map(|_| std::sync::Mutex::new(None)).collect();
    par_for(n, |i| {
        let r = f(i);
        *slots[i].lock().expect("no worker panicked") = Some(r);
    });
    slots.into_iter().map(|m| m.into_inner().expect("no worker panicked").expect("every index ran")).collect()
}

/// One micro-batch of a [`coupled`](Recipe::coupled) recipe: shards forward on separate cores,
/// the coupled loss on a leaf copy of their vectors, then each shard's backward of its weighted
/// separable loss plus `Σ vectors ⊙ ∂L_coupled/∂vectors` on separate cores; gradients summed in
/// shard order.
pub fn run_coupled(
    recipe: &dyn Recipe,
    batch: &[usize],
    shards: &[&[usize]],
    seeds: &[u64],
    accum: usize,
    params: &Params,
) -> Result<MicroBatch> {
    let n = shards.len();
    let b = batch.len() as f64;
    let accum = accum as f64;
    let forward = par_map(n, |i| -> Result<(StepLoss, Tensor, Vec<RowLookup>, f64)> {
        let mut ctx = TrainContext::recording(Rng::seed_from_u64(seeds[i]));
        let t0 = Instant::now();
        let (l, v) = recipe.shard_forward(shards[i], &mut ctx)?;
        Ok((l, v, ctx.take_lookups(), t0.elapsed().as_secs_f64()))
    });
    let mut out = MicroBatch {
        grads: GradStore::default(),
        loss: 0.0,
        terms: Vec::new(),
        sentences: 0,
        non_finite: None,
        forward_s: 0.0,
        backward_s: 0.0,
    };
    let mut parts = Vec::with_capacity(n);
    for (i, r) in forward.into_iter().enumerate() {
        let (mut l, v, lookups, fwd) = r?;
        let w = shards[i].len() as f64 / b / accum;
        let value = l.total.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
        let terms = read_terms(std::mem::take(&mut l.later), l.terms)?;
        if !value.is_finite() {
            out.non_finite.get_or_insert((value, terms.clone()));
        }
        out.loss += value * w;
        add_terms(&mut out.terms, terms.iter().map(|(k, x)| (k.clone(), x * w)).collect());
        out.sentences += l.sentences;
        out.forward_s += fwd;
        parts.push((l.total, v, w, lookups));
    }
    let t0 = Instant::now();
    let detached: Vec<Tensor> = parts.iter().map(|p| p.1.detach()).collect();
    let leaf = candle_core::Var::from_tensor(&Tensor::cat(&detached, 0)?)?;
    let mut c = recipe.coupled_loss(batch, leaf.as_tensor())?;
    c.terms = read_terms(std::mem::take(&mut c.later), c.terms)?;
    let value = c.total.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
    if !value.is_finite() {
        out.non_finite.get_or_insert((value, c.terms.clone()));
    }
    if out.non_finite.is_some() {
        return Ok(out);
    }
    out.loss += value / accum;
    add_terms(&mut out.terms, c.terms.iter().map(|(k, x)| (k.clone(), x / accum)).collect());
    let dv = c.total.backward()?.remove(leaf.as_tensor()).map(|g| g / accum).transpose()?;
    let coupled_s = t0.elapsed().as_secs_f64();
    let mut offsets = vec![0usize; n + 1];
    for (i, p) in parts.iter().enumerate() {
        offsets[i + 1] = offsets[i] + p.1.dim(0)?;
    }
    let backward = par_map(n, |i| -> Result<(GradStore, RowGrads, f64)> {
        let t1 = Instant::now();
        let (sep, v, w, lookups) = &parts[i];
        let mut surrogate = (sep * *w)?;
        if let Some(dv) = &dv {
            let g = dv.narrow(0, offsets[i], offsets[i + 1] - offsets[i])?;
            surrogate = (surrogate + v.mul(&g)?.sum_all()?)?;
        }
        let mut grads = surrogate.backward()?;
        let rows = take_row_grads(&mut grads, lookups)?;
        Ok((grads, rows, t1.elapsed().as_secs_f64()))
    });
    let mut acc = None;
    let mut tables = TableGrads::default();
    for r in backward {
        let (g, rows, s) = r?;
        out.backward_s += s;
        acc = Some(add_grads(acc, g, params)?);
        tables.add(rows);
    }
    out.backward_s += coupled_s;
    if let Some(a) = acc {
        out.grads = a;
    }
    tables.into_store(&mut out.grads)?;
    Ok(out)
}

/// A shard's gradients of its row-sparse token lookups (see [`TrainContext::recording`]), taken out
/// of its gradient store: per lookup the table, the rows used and their gradient (row-major).
type RowGrads = Vec<(Tensor, Vec<u32>, Vec<f32>)>;

pub(crate) fn take_row_grads(grads: &mut GradStore, lookups: &[RowLookup]) -> Result<RowGrads> {
    let mut out = Vec::with_capacity(lookups.len());
    for l in lookups {
        if let Some(g) = grads.remove(l.leaf.as_tensor()) {
            out.push((l.table.clone(), l.rows.clone(), g.flatten_all()?.to_vec1::<f32>()?));
        }
    }
    Ok(out)
}

/// Token tables' gradients summed row by row from shards' [`RowGrads`] in the order added: one
/// table-sized buffer per table and micro-batch instead of a dense zeroed tensor and copies per lookup.
/// Each row gets the additions of the dense path, grouped per lookup (so equal to it up to the
/// rounding of a different order of additions).
#[derive(Default)]
pub(crate) struct TableGrads(Vec<(Tensor, Vec<f32>)>);

impl TableGrads {
    fn add(&mut self, rows: RowGrads) {
        for (table, ids, vals) in rows {
            let i = match self.0.iter().position(|(t, _)| t.id() == table.id()) {
                Some(i) => i,
                None => {
                    let n = table.elem_count();
                    self.0.push((table, vec![0f32; n]));
                    self.0.len() - 1
                }
            };
            let buf = &mut self.0[i].1;
            let h = vals.len() / ids.len().max(1);
            for (k, &r) in ids.iter().enumerate() {
                let dst = &mut buf[r as usize * h..(r as usize + 1) * h];
                for (d, v) in dst.iter_mut().zip(&vals[k * h..(k + 1) * h]) {
                    *d += v;
                }
            }
        }
    }

    /// Adds each table's gradient into `grads` (after any dense gradient it already holds, e.g.
    /// of an output layer tied to the table).
    fn into_store(self, grads: &mut GradStore) -> Result<()> {
        for (table, buf) in self.0 {
            let g = Tensor::from_vec(buf, table.shape(), table.device())?;
            let sum = match grads.get(&table) {
                Some(dense) => (dense + &g)?,
                None => g,
            };
            grads.insert(&table, sum);
        }
        Ok(())
    }
}

pub(crate) fn add_grads(acc: Option<GradStore>, g: GradStore, params: &Params) -> Result<GradStore> {
    let Some(mut acc) = acc else { return Ok(g) };
    for (_, var) in &params.vars {
        let t = var.as_tensor();
        match (acc.get(t), g.get(t)) {
            (Some(a), Some(b)) => {
                let s = (a + b)?;
                acc.insert(t, s);
            }
            (None, Some(b)) => {
                acc.insert(t, b.clone());
            }
            _ => {}
        }
    }
    Ok(acc)
}

#[cfg(test)]
mod row_lookup_tests {
    use super::*;
    use crate::model::config::EncoderConfig;
    use crate::model::encoder::{Encoder, Mode};
    use candle_core::{DType, Device};
    use rand::Rng as _;

    /// A 2-layer BERT with seeded random weights (dropout on).
    fn tiny() -> (Encoder, candle_nn::VarMap) {
        let cfg: EncoderConfig = serde_json::from_value(serde_json::json!({
            "model_type": "bert", "vocab_size": 50, "hidden_size": 8, "num_hidden_layers": 2,
            "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 16
        }))
        .unwrap();
        let vm = candle_nn::VarMap::new();
        let enc = Encoder::load(candle_nn::VarBuilder::from_varmap(&vm, DType::F32, &Device::Cpu), &cfg).unwrap();
        let mut rng = Rng::seed_from_u64(5);
        for v in vm.all_vars() {
            let vals: Vec<f32> = (0..v.elem_count()).map(|_| rng.random::<f32>() - 0.5).collect();
            v.set(&Tensor::from_vec(vals, v.shape(), &Device::Cpu).unwrap()).unwrap();
        }
        (enc, vm)
    }

    /// Two lookups (token 7 in both), a use of the whole table besides (as a tied output layer
    /// makes), dropout on: the row-wise table gradient equals candle's dense one.
    #[test]
    fn row_sparse_token_lookups_give_the_dense_gradient() {
        let (enc, _vm) = tiny();
        let table = enc.word_embeddings().clone();
        let dev = Device::Cpu;
        let ids_a = Tensor::new(&[[1u32, 7, 7, 3], [9, 7, 2, 0]], &dev).unwrap();
        let ids_b = Tensor::new(&[[7u32, 40, 3, 3]], &dev).unwrap();
        let tied =
            Tensor::from_vec((0..50 * 8).map(|i| ((i % 13) as f32 - 6.0) / 7.0).collect::<Vec<_>>(), (50, 8), &dev)
                .unwrap();
        let loss = |ctx: &mut TrainContext| -> Tensor {
            let mut total = (table.mul(&tied).unwrap().sum_all().unwrap() * 0.1).unwrap();
            for ids in [&ids_a, &ids_b] {
                let mask = ids.ones_like().unwrap();
                let h = enc.forward(ids, &mask, &mut Mode::Train(ctx)).unwrap();
                total = (total + h.sqr().unwrap().sum_all().unwrap().sqrt().unwrap()).unwrap();
            }
            total
        };
        let dense_loss = loss(&mut TrainContext::new(Rng::seed_from_u64(11)));
        let dense = dense_loss.backward().unwrap().get(&table).unwrap().to_vec2::<f32>().unwrap();

        let mut ctx = TrainContext::recording(Rng::seed_from_u64(11));
        let sparse_loss = loss(&mut ctx);
        let lookups = ctx.take_lookups();
        assert_eq!(lookups.len(), 2, "one leaf per lookup");
        assert_eq!(lookups[0].rows, vec![0, 1, 2, 3, 7, 9]);
        assert_eq!(sparse_loss.to_scalar::<f32>().unwrap(), dense_loss.to_scalar::<f32>().unwrap(), "the same forward");
        let mut grads = sparse_loss.backward().unwrap();
        let rows = take_row_grads(&mut grads, &lookups).unwrap();
        assert_eq!(rows.len(), 2);
        let mut tables = TableGrads::default();
        tables.add(rows);
        tables.into_store(&mut grads).unwrap();
        let sparse = grads.get(&table).unwrap().to_vec2::<f32>().unwrap();
        for (r, (d, s)) in dense.iter().zip(&sparse).enumerate() {
            for (a, b) in d.iter().zip(s) {
                assert!((a - b).abs() <= 1e-6 * a.abs().max(1.0), "row {r}: dense {a} vs row-wise {b}");
            }
        }
        // Rows no lookup used get only the tied part.
        assert_eq!(sparse[5], dense[5]);
        // In a context that does not record, the lookup is candle's, with its dense gradient.
        let again = loss(&mut TrainContext::new(Rng::seed_from_u64(11)))
            .backward()
            .unwrap()
            .get(&table)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        assert_eq!(again, dense);
    }
}

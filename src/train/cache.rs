//! Embeddings of a frozen encoder, computed once and cached on disk (`<cache>/<kind>/<key>.safetensors`),
//! keyed by the encoder's files, its settings and the sentences.

use crate::model::SentenceEncoder;
use anyhow::{Context, Result};
use candle_core::{Device, Tensor};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::PathBuf;

/// Embeddings of `sentences` by the frozen `enc`, from the cache when the same encoder with the
/// same settings embedded the same sentences before. Returns the rows (flattened, in the order
/// of `sentences`) and the dimension. `kind` names the cache folder and the log lines
/// ("teacher", "base").
pub fn embeddings(enc: &SentenceEncoder, sentences: &[String], batch: usize, kind: &str) -> Result<(Vec<f32>, usize)> {
    let key = cache_key(enc, sentences)?;
    let dir = super::cache_dir().join(kind);
    let path = dir.join(format!("{key}.safetensors"));
    if path.is_file() {
        if let Ok(t) = candle_core::safetensors::load(&path, &Device::Cpu) {
            if let Some(e) = t.get("embeddings") {
                if e.dim(0)? == sentences.len() {
                    eprintln!("xsent train: {kind} embeddings from the cache {}", path.display());
                    return Ok((e.flatten_all()?.to_vec1()?, e.dim(1)?));
                }
            }
        }
    }
    let t0 = std::time::Instant::now();
    eprintln!("xsent train: embedding {} sentences with the {kind} {}", sentences.len(), enc.files.spec);
    let rows = embed_with_progress(enc, sentences, batch, kind)?;
    let dim = enc.dim();
    let flat: Vec<f32> = rows.into_iter().flatten().collect();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create the cache {}", dir.display()))?;
    let t = Tensor::from_vec(flat.clone(), (sentences.len(), dim), &Device::Cpu)?;
    crate::model::weights::save_tensors(&HashMap::from([("embeddings".to_string(), t)]), &path)?;
    eprintln!("xsent train: {kind} embeddings cached in {} ({:.1} s)", path.display(), t0.elapsed().as_secs_f64());
    Ok((flat, dim))
}

/// `enc.embed` with progress on stderr: a bar on a terminal, else a line about every 30 seconds
/// (embedding a corpus for the cache can take most of an hour).
fn embed_with_progress(enc: &SentenceEncoder, sentences: &[String], batch: usize, kind: &str) -> Result<Vec<Vec<f32>>> {
    let items = enc.tokenize(sentences)?;
    let total = items.len() as u64;
    let bar = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
        indicatif::ProgressBar::new(total).with_style(
            indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} sentences, ETA {eta}")
                .expect("a valid template")
                .progress_chars("=> "),
        )
    });
    let t0 = std::time::Instant::now();
    // Sentences done, and when the last line was printed.
    let state = std::sync::Mutex::new((0u64, t0));
    let report = |n: usize| {
        let mut st = state.lock().expect("no worker panicked");
        st.0 += n as u64;
        let done = st.0;
        match &bar {
            Some(b) => b.set_position(done),
            None if st.1.elapsed().as_secs() >= 30 && done < total => {
                st.1 = std::time::Instant::now();
                let secs = t0.elapsed().as_secs_f64();
                eprintln!(
                    "xsent train: {kind}: {done}/{total} sentences embedded ({:.0} sent/s, longest first; {:.0} s so far)",
                    done as f64 / secs,
                    secs
                );
            }
            None => {}
        }
    };
    let rows = enc.embed_encoded_with_progress(&items, batch, &report)?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(rows)
}

/// sha256 of the encoder's files (config, weights, tokenizer, Dense), its settings and the sentences.
fn cache_key(enc: &SentenceEncoder, sentences: &[String]) -> Result<String> {
    let mut h = Sha256::new();
    let f = &enc.files;
    let mut files: Vec<PathBuf> = vec![f.config.clone(), f.weights.clone(), f.tokenizer.clone()];
    if let Some(d) = &f.dense {
        files.push(d.join("model.safetensors"));
    }
    for p in files {
        let mut file = std::fs::File::open(&p).with_context(|| format!("cannot read {}", p.display()))?;
        std::io::copy(&mut file, &mut h)?;
    }
    h.update(format!(
        "{}\0{}\0{}\0{}\0{}\0",
        enc.prefix,
        enc.pooling,
        enc.normalize,
        enc.max_length,
        enc.encoder.num_layers()
    ));
    for s in sentences {
        h.update(s.as_bytes());
        h.update([0u8]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

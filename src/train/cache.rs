//! Embeddings of a frozen encoder, computed once and cached on disk (`<cache>/<kind>/<key>.safetensors`),
//! keyed by the encoder's files, its settings and the sentences. Beside each file,
//! `<key>.json` lists its sentences and names the encoder, so a new set of sentences (another
//! seed's validation split, another `val_size`, a language more) takes the rows it shares with
//! any cached set of the same encoder and embeds only the rest.

use crate::model::SentenceEncoder;
use anyhow::{Context, Result};
use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;

/// What `<key>.json` holds.
#[derive(Serialize, Deserialize)]
struct Listing {
    /// [`encoder_hash`] of the encoder that embedded them.
    encoder: String,
    sentences: Vec<String>,
    /// sha256 of the rows (float32, little-endian); None in listings written before it was
    /// recorded. A file that does not match is embedded again: one flipped byte changed the
    /// training without a word.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sha256: Option<String>,
}

/// sha256 of rows as the cache file stores them (float32, little-endian).
fn rows_sha256(rows: &[f32]) -> String {
    let mut h = Sha256::new();
    for chunk in rows.chunks(16384) {
        let bytes: Vec<u8> = chunk.iter().flat_map(|x| x.to_le_bytes()).collect();
        h.update(&bytes);
    }
    format!("{:x}", h.finalize())
}

/// The listing beside a cache file, if it is readable.
fn read_listing(path: &Path) -> Option<Listing> {
    std::fs::read(path.with_extension("json")).ok().and_then(|b| serde_json::from_slice(&b).ok())
}

/// Embeddings of `sentences` by the frozen `enc`, from the cache when the same encoder with the
/// same settings embedded them before (all of them, or some in other sets). Returns the rows
/// (flattened, in the order of `sentences`) and the dimension. `kind` names the cache folder
/// and the log lines ("teacher", "base", "student").
pub fn embeddings(enc: &SentenceEncoder, sentences: &[String], batch: usize, kind: &str) -> Result<(Vec<f32>, usize)> {
    let (encoder, hasher) = encoder_hash(enc)?;
    let key = set_key(hasher, sentences);
    let dir = super::cache_dir().join(kind);
    let path = dir.join(format!("{key}.safetensors"));
    let dim = enc.dim();
    let listing = read_listing(&path);
    match load_rows(&path, sentences.len(), dim, listing.as_ref().and_then(|l| l.sha256.as_deref())) {
        Ok(Some(rows)) => {
            errln!("xsent train: {kind} embeddings from the cache {}", path.display());
            if listing.as_ref().is_none_or(|l| l.sha256.is_none()) {
                // Written before listings (or their checksums) existed: list it now, so other
                // sets can share its rows and a later change to it is found. Only a saving: a
                // cache this run may not write (another user's) is read all the same.
                if let Err(e) = write_listing(&path, &encoder, sentences, &rows) {
                    errln!("xsent train: note: cannot list {} in the cache: {e:#}", path.display());
                }
            }
            return Ok((rows, dim));
        }
        Ok(None) => {}
        Err(why) => errln!("xsent train: the cache file {} {why}: embedding again", path.display()),
    }
    let t0 = std::time::Instant::now();
    let mut flat = vec![0f32; sentences.len() * dim];
    let missing = fill_from_other_sets(&dir, &encoder, sentences, dim, &mut flat, &path);
    let todo: Vec<String> = missing.iter().map(|&i| sentences[i].clone()).collect();
    if todo.is_empty() {
        errln!("xsent train: {kind} embeddings of all {} sentences from other cached sets", sentences.len());
    } else if todo.len() < sentences.len() {
        errln!(
            "xsent train: {kind} embeddings of {} of {} sentences from the cache; embedding the other {} with {}",
            sentences.len() - todo.len(),
            sentences.len(),
            todo.len(),
            enc.files.spec
        );
    } else {
        errln!("xsent train: embedding {} sentences with the {kind} {}", sentences.len(), enc.files.spec);
    }
    if !todo.is_empty() {
        let rows = embed_with_progress(enc, &todo, batch, kind)?;
        for (&i, row) in missing.iter().zip(rows) {
            flat[i * dim..(i + 1) * dim].copy_from_slice(&row);
        }
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create the cache {}", dir.display()))?;
    let t = Tensor::from_vec(flat.clone(), (sentences.len(), dim), &Device::Cpu)?;
    crate::model::weights::save_tensors(&HashMap::from([("embeddings".to_string(), t)]), &path)?;
    // (The tensor, a copy of `flat`, is gone here.)
    write_listing(&path, &encoder, sentences, &flat)?;
    errln!("xsent train: {kind} embeddings cached in {} ({:.1} s)", path.display(), t0.elapsed().as_secs_f64());
    Ok((flat, dim))
}

/// The rows of a cached file, if it is readable and has `n` rows of `dim` (None: not cached, or
/// cut short). An error says why a file that is there may not be used: its rows do not match
/// the `sha256` of its listing, or hold values that are not finite.
fn load_rows(path: &Path, n: usize, dim: usize, sha256: Option<&str>) -> Result<Option<Vec<f32>>, String> {
    let Ok(t) = candle_core::safetensors::load(path, &Device::Cpu) else { return Ok(None) };
    let Some(e) = t.get("embeddings").filter(|e| e.dims() == [n, dim]) else { return Ok(None) };
    let Some(rows) = e.flatten_all().ok().and_then(|e| e.to_vec1::<f32>().ok()) else { return Ok(None) };
    if sha256.is_some_and(|want| rows_sha256(&rows) != want) {
        return Err("does not match the checksum its listing records (changed on disk)".into());
    }
    if let Some(i) = rows.iter().position(|x| !x.is_finite()) {
        return Err(format!("holds {} in row {}", rows[i], i / dim.max(1)));
    }
    Ok(Some(rows))
}

/// Copy into `flat` the rows of `sentences` that a cached set of the same encoder holds;
/// returns the indices of the sentences none holds. An unreadable cache file is passed over
/// (the cache only saves time).
fn fill_from_other_sets(
    dir: &Path,
    encoder: &str,
    sentences: &[String],
    dim: usize,
    flat: &mut [f32],
    own: &Path,
) -> Vec<usize> {
    let mut want: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, s) in sentences.iter().enumerate() {
        want.entry(s.as_str()).or_default().push(i);
    }
    let listings = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path());
    // This set's own file was tried (and found wanting) already.
    let own = own.with_extension("json");
    for json in listings.filter(|p| p.extension().is_some_and(|e| e == "json") && *p != own) {
        if want.is_empty() {
            break;
        }
        let Some(listing) = read_listing(&json) else { continue };
        if listing.encoder != encoder || !listing.sentences.iter().any(|s| want.contains_key(s.as_str())) {
            continue;
        }
        let file = json.with_extension("safetensors");
        let rows = match load_rows(&file, listing.sentences.len(), dim, listing.sha256.as_deref()) {
            Ok(Some(rows)) => rows,
            Ok(None) => continue,
            Err(why) => {
                errln!("xsent train: the cache file {} {why}: not used", file.display());
                continue;
            }
        };
        for (r, s) in listing.sentences.iter().enumerate() {
            if let Some(targets) = want.remove(s.as_str()) {
                for i in targets {
                    flat[i * dim..(i + 1) * dim].copy_from_slice(&rows[r * dim..(r + 1) * dim]);
                }
            }
        }
    }
    let mut missing: Vec<usize> = want.into_values().flatten().collect();
    missing.sort_unstable();
    missing
}

/// `<key>.json` beside the cache file `<key>.safetensors` (written atomically).
fn write_listing(path: &Path, encoder: &str, sentences: &[String], rows: &[f32]) -> Result<()> {
    let json = path.with_extension("json");
    // Per process: runs sharing the cache may list the same set at once.
    let tmp = path.with_extension(format!("json.tmp-{}", std::process::id()));
    let listing =
        Listing { encoder: encoder.to_string(), sentences: sentences.to_vec(), sha256: Some(rows_sha256(rows)) };
    std::fs::write(&tmp, serde_json::to_vec(&listing)?).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &json).with_context(|| format!("cannot move {} into place", json.display()))
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
                errln!(
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

/// The hash of the encoder's files (config, weights, tokenizer), its Dense module's weights as
/// held in memory (loaded from a file or fitted by a recipe) and its settings, as hex (the
/// encoder's name in listings) and as a hasher to go on with the sentences.
fn encoder_hash(enc: &SentenceEncoder) -> Result<(String, Sha256)> {
    let mut h = Sha256::new();
    let f = &enc.files;
    for p in std::iter::once(&f.config).chain(&f.weights).chain([&f.tokenizer]) {
        let mut file = std::fs::File::open(p).with_context(|| format!("cannot read {}", p.display()))?;
        std::io::copy(&mut file, &mut h)?;
    }
    // A vocab.txt tokenizer takes its settings from the files beside it.
    if crate::model::wordpiece::is_vocab_file(&f.tokenizer) {
        h.update(crate::model::wordpiece::tokenizer_json(&f.tokenizer)?);
    }
    if let Some(d) = &enc.dense {
        h.update(format!("dense {:?} {:?}\0", d.linear.weight.dims(), d.activation));
        for t in [&d.linear.weight, &d.linear.bias] {
            for x in t.flatten_all()?.to_dtype(candle_core::DType::F32)?.to_vec1::<f32>()? {
                h.update(x.to_le_bytes());
            }
        }
    }
    h.update(format!(
        "{}\0{}\0{}\0{}\0{}\0",
        enc.prefix,
        enc.pooling,
        enc.normalize,
        enc.max_length,
        enc.encoder.num_layers()
    ));
    // Lowercasing changes the tokens. Hashed only when on, so that the keys of the (many)
    // models without it stay those of the caches already written.
    if enc.lowercase {
        h.update("lowercase\0");
    }
    Ok((hex(&h.clone().finalize()), h))
}

/// A set's file name: the encoder's hash continued with the sentences (the key cache files had
/// before listings were written, so those are still found).
fn set_key(mut h: Sha256, sentences: &[String]) -> String {
    for s in sentences {
        h.update(s.as_bytes());
        h.update([0u8]);
    }
    hex(&h.finalize())
}

use crate::io::digest::hex;

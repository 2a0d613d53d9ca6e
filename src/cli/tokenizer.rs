use crate::model::kinds::vocab::{self, SubwordModel};
use anyhow::{Context, Result};
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Learn a shared SentencePiece-style vocabulary (unigram or BPE, NFKC, `▁` word
    /// boundaries) from text files, one sentence per line (`.gz` read through gzip), and save it
    /// as a tokenizer.json that the `sp` and `lightweight` recipes (`sp.tokenizer`,
    /// `lightweight.tokenizer`) and the `tokenizers` library load.
    Train(TrainArgs),
}

#[derive(clap::Args)]
pub struct TrainArgs {
    /// Text files, one sentence per line; all languages together give one shared vocabulary.
    #[arg(long, short = 'i', required = true, num_args = 1..)]
    input: Vec<PathBuf>,
    /// Where to write the tokenizer: a .json file, or a directory (DIR/tokenizer.json).
    #[arg(long, short = 'o')]
    output: PathBuf,
    #[arg(long, value_enum, default_value_t = SubwordModel::Unigram)]
    model: SubwordModel,
    #[arg(long, default_value_t = 20_000)]
    vocab_size: usize,
    /// Lowercase the text (NFKC is always applied).
    #[arg(long)]
    lowercase: bool,
    /// Learn from at most this many lines: a uniform sample of them when the files hold more
    /// (SentencePiece's `input_sentence_size`). Memory grows with this, not with the files.
    #[arg(long, default_value_t = DEFAULT_MAX_SENTENCES, value_parser = clap::value_parser!(u64).range(1..))]
    max_sentences: u64,
}

/// The `.json` files a model directory keeps by name (Hugging Face, sentence-transformers,
/// xsent): `tokenizer train` never writes one of them in a model directory.
const MODEL_FILES: &[&str] = &[
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "generation_config.json",
    "model.safetensors.index.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "xsent.json",
];

/// `--max-sentences`' default.
pub const DEFAULT_MAX_SENTENCES: u64 = 2_000_000;

pub fn run(c: Command) -> Result<()> {
    match c {
        Command::Train(a) => {
            let t0 = std::time::Instant::now();
            let json = a.output.extension().is_some_and(|e| e == "json");
            if a.output.is_file() && !json {
                anyhow::bail!(
                    "-o {} is a file: give a folder (tokenizer.json is written into it) or a path ending in .json",
                    a.output.display()
                );
            }
            let path = if json { a.output.clone() } else { a.output.join("tokenizer.json") };
            let inputs: Vec<&std::path::Path> = a.input.iter().map(PathBuf::as_path).collect();
            crate::cli::check_not_input(&path, "-o", &inputs)?;
            anyhow::ensure!(
                !path.is_dir(),
                "-o {}: {} is a folder; give another path",
                a.output.display(),
                path.display()
            );
            // A model's tokenizer is part of the model, and a run's vocabulary part of the run
            // (a resume reloads it): a new vocabulary would silently change their vectors (the
            // ids no longer match the embeddings they were trained with). So is any file a model
            // directory keeps by name. The output is judged where its name is (a hub snapshot's
            // files are links into blobs/) and, for a link, where it leads (the write replaces
            // the link itself, never its target).
            let named_in = path
                .parent()
                .map(|d| if d.as_os_str().is_empty() { std::path::Path::new(".") } else { d })
                .and_then(|d| std::fs::canonicalize(d).ok())
                .zip(path.file_name().map(|n| n.to_os_string()));
            let target = std::fs::canonicalize(&path)
                .ok()
                .and_then(|t| Some((t.parent()?.to_path_buf(), t.file_name()?.to_os_string())))
                .filter(|_| std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()));
            for (dir, name, through) in named_in
                .map(|(d, n)| (d, n, String::new()))
                .into_iter()
                .chain(target.map(|(d, n)| (d.clone(), n.clone(), format!(" (a link to {})", d.join(&n).display()))))
            {
                let model = ["config.json", "xsent.json", "model.safetensors"].iter().find(|f| dir.join(f).is_file());
                if let Some(f) = model.filter(|_| MODEL_FILES.iter().any(|m| name == *m)) {
                    anyhow::bail!(
                        "-o {}{through}: {} holds a model ({f}) whose {} this would replace: give another path",
                        a.output.display(),
                        dir.display(),
                        name.to_string_lossy()
                    );
                }
                let run =
                    dir.parent().map(|r| r.join("config.toml")).filter(|c| crate::train::run_dir::is_run_config(c));
                if let Some(c) = run.filter(|_| name == "tokenizer.json") {
                    anyhow::bail!(
                        "-o {}{through}: {} is inside the run directory of {}, whose tokenizer.json this would replace: give another path",
                        a.output.display(),
                        dir.display(),
                        c.display()
                    );
                }
            }
            crate::io::output::refuse_read_only(&path, &path, "-o", false)?;
            // The folder the tokenizer goes into must be one, or be makeable: checked before
            // the corpus is read, made only once the vocabulary is learned (an interrupted run
            // leaves nothing).
            let parent = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
            if let Some(file) = parent.ancestors().find(|d| !d.as_os_str().is_empty() && d.exists() && !d.is_dir()) {
                anyhow::bail!("-o {}: {} is a file, not a folder", a.output.display(), file.display());
            }
            let corpus = vocab::read_corpus(&a.input, usize::try_from(a.max_sentences).unwrap_or(usize::MAX))?;
            for (f, n) in &corpus.too_long {
                errln!(
                    "xsent tokenizer: {n} lines of {} are longer than {} bytes and left out (as SentencePiece)",
                    f.display(),
                    vocab::MAX_LINE_BYTES
                );
            }
            if corpus.lines.len() < corpus.usable {
                errln!(
                    "xsent tokenizer: learning from {} of the {} lines, sampled uniformly (--max-sentences)",
                    corpus.lines.len(),
                    corpus.usable
                );
            }
            let texts: Vec<&str> = corpus.lines.iter().map(String::as_str).collect();
            let tok = vocab::train_subword(&texts, a.model, a.vocab_size, a.lowercase)?;
            let json = tok.to_string(true).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
            crate::io::atomic::write_file_atomically(&path, json.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
            errln!(
                "xsent tokenizer: {} vocabulary of {} pieces from {} lines written to {} ({:.1} s)",
                match a.model {
                    SubwordModel::Unigram => "unigram",
                    SubwordModel::Bpe => "BPE",
                },
                tok.get_vocab_size(true),
                corpus.lines.len(),
                path.display(),
                t0.elapsed().as_secs_f64()
            );
            Ok(())
        }
    }
}

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
}

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
            // ids no longer match the embeddings they were trained with).
            if path.file_name().is_some_and(|n| n == "tokenizer.json") && path.exists() {
                let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
                // Absolute, so that `-o .` inside a run's vocab/ finds the run above it.
                let dir = &std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
                let model = ["config.json", "xsent.json", "model.safetensors"].iter().find(|f| dir.join(f).is_file());
                let run =
                    dir.parent().map(|r| r.join("config.toml")).filter(|c| crate::train::run_dir::is_run_config(c));
                if let Some(f) = model {
                    anyhow::bail!(
                        "-o {}: {} holds a model ({f}) whose tokenizer.json this would replace: give another path",
                        a.output.display(),
                        dir.display()
                    );
                }
                if let Some(c) = run {
                    anyhow::bail!(
                        "-o {}: {} is inside the run directory of {}, whose tokenizer.json this would replace: give another path",
                        a.output.display(),
                        dir.display(),
                        c.display()
                    );
                }
            }
            let lines = vocab::read_corpus(&a.input)?;
            // The output's place is made once the corpus is read, before it is trained on.
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            }
            let texts: Vec<&str> = lines.iter().map(String::as_str).collect();
            let tok = vocab::train_subword(&texts, a.model, a.vocab_size, a.lowercase)?;
            tok.save(&path, true).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            errln!(
                "xsent tokenizer: {} vocabulary of {} pieces from {} lines written to {} ({:.1} s)",
                match a.model {
                    SubwordModel::Unigram => "unigram",
                    SubwordModel::Bpe => "BPE",
                },
                tok.get_vocab_size(true),
                lines.len(),
                path.display(),
                t0.elapsed().as_secs_f64()
            );
            Ok(())
        }
    }
}

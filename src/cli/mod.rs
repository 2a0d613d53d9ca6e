//! The command line, thin over the library.

mod convert;
mod embed;
mod eval;
mod mine;
mod train;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xsent", version, about = "Multilingual sentence embeddings: embed, evaluate, mine, train, convert")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Embed sentences, one per line, from stdin or --input.
    Embed(embed::Args),
    /// Evaluate a model on a benchmark with the papers' protocols.
    #[command(subcommand)]
    Eval(eval::Task),
    /// Mine parallel sentences from two monolingual files with margin scoring (LASER's
    /// mine_bitexts): TSV `score<TAB>src<TAB>tgt`, best first.
    Mine(mine::Args),
    /// Train a model with one of the recipes (configs/*.toml).
    Train(train::Args),
    /// Convert foreign model formats into a Hugging Face model directory.
    #[command(subcommand)]
    Convert(convert::Convert),
}

/// Options shared by every command that loads a model.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// Model directory (config.json, model.safetensors, tokenizer.json) or hub id org/name[@revision].
    #[arg(long, short = 'm')]
    pub model: String,
    /// Text prepended to every input (e5 models want "query: ").
    #[arg(long)]
    pub prefix: Option<String>,
    /// Pooling (default: the model's 1_Pooling/config.json, else mean).
    #[arg(long, value_enum)]
    pub pooling: Option<crate::Pooling>,
    /// Truncate inputs to this many tokens, specials included (default: max_seq_length of
    /// sentence_bert_config.json, else the model's maximum, at most 512).
    #[arg(long)]
    pub max_length: Option<usize>,
    /// L2-normalise embeddings (the default).
    #[arg(long, overrides_with = "no_normalize")]
    pub normalize: bool,
    /// Do not L2-normalise embeddings.
    #[arg(long, overrides_with = "normalize")]
    pub no_normalize: bool,
    /// Keep only the first N transformer layers.
    #[arg(long)]
    pub layers: Option<usize>,
    /// cpu, cuda or cuda:N (cuda needs a build with --features cuda).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Which output of a model with several heads (a disentangle model: meaning, the default,
    /// or language).
    #[arg(long)]
    pub head: Option<String>,
}

impl ModelArgs {
    pub fn load(&self) -> anyhow::Result<Box<dyn crate::model::Embedder>> {
        let opts = crate::model::LoadOptions {
            device: crate::device::parse_device(&self.device)?,
            layers: self.layers,
            pooling: self.pooling,
            prefix: self.prefix.clone(),
            max_length: self.max_length,
            normalize: !self.no_normalize,
            trainable: false,
        };
        crate::model::load_embedder(&self.model, &opts, self.head.as_deref())
    }
}

/// Run the CLI; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match cli.command {
        Command::Embed(_) | Command::Eval(_) | Command::Mine(_) | Command::Train(_) => crate::parallel::init_data_parallel(),
        Command::Convert(_) => {}
    }
    let result = match cli.command {
        Command::Embed(args) => embed::run(args).map(|()| 0),
        Command::Convert(c) => convert::run(c).map(|()| 0),
        Command::Eval(t) => eval::run(t).map(|()| 0),
        Command::Mine(a) => mine::run(a).map(|()| 0),
        Command::Train(a) => train::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xsent: error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            1
        }
    }
}

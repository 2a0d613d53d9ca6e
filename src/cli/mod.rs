//! The command line, thin over the library.

mod config;
mod convert;
mod cuts;
mod data;
mod embed;
mod eval;
mod index;
mod mine;
mod plot;
mod quantize;
mod tokenizer;
mod train;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "xsent",
    version,
    about = "Multilingual sentence embeddings: embed, evaluate, mine, train, plot, convert"
)]
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
    /// Approximate nearest neighbours: build and search IVF indexes of vector files.
    #[command(subcommand)]
    Index(index::Command),
    /// Train a model with one of the recipes (configs/*.toml).
    Train(train::Args),
    /// Draw pictures of embedding spaces (PNG).
    #[command(subcommand)]
    Plot(plot::Plot),
    /// Vocabularies: `xsent tokenizer train` learns a SentencePiece-style one from text.
    #[command(subcommand)]
    Tokenizer(tokenizer::Command),
    /// Convert foreign model formats into a Hugging Face model directory.
    #[command(subcommand)]
    Convert(convert::Convert),
    /// Write a model directory with the encoder's linear layers in int8 or bf16, which
    /// `--model OUT` loads directly.
    Quantize(quantize::Args),
    /// The built-in training configs: `xsent config list`, `xsent config show NAME`.
    #[command(subcommand)]
    Config(config::Command),
    /// The benchmark data: `xsent data list`, `xsent data fetch SET`; `xsent data audit` checks a
    /// config's training sources against the evaluation sets.
    #[command(subcommand)]
    Data(data::Command),
}

/// Options shared by every command that loads a model.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// Model directory (config.json, model.safetensors, tokenizer.json) or hub id org/name[@revision].
    /// A bare name (all-MiniLM-L6-v2) is looked up in the models folder. Default:
    /// multilingual-e5-small in the models folder: $XSENT_MODELS, else
    /// ${XSENT_CACHE:-~/.cache/xsent}/models (where scripts/setup.sh installs it; models/ of
    /// xsent's checkout when only that exists).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// Text prepended to every input (e5 models want "query: "). Default: the model's default
    /// prompt (sentence-transformers' config_sentence_transformers.json), else none; "" for none.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Use the model's prompt of this name as the prefix (sentence-transformers' prompt_name,
    /// e.g. query or document).
    #[arg(long, conflicts_with = "prefix")]
    pub prompt_name: Option<String>,
    /// Pooling (default: the model's 1_Pooling/config.json, else mean).
    #[arg(long, value_enum)]
    pub pooling: Option<crate::Pooling>,
    /// Truncate inputs to this many tokens, specials included (default: max_seq_length of
    /// sentence_bert_config.json, else model_max_length of tokenizer_config.json up to the
    /// model's maximum, else the model's maximum, at most 512).
    #[arg(long)]
    pub max_length: Option<usize>,
    /// L2-normalise embeddings (the default when the model's modules.json lists a Normalize
    /// module, as sentence-transformers does, or the model has no modules.json).
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
    /// Load weights that hold tensors the model does not use (e.g. more layers than
    /// config.json's num_hidden_layers); without it that is an error naming them. (--layers N
    /// runs fewer layers on purpose.)
    #[arg(long)]
    pub allow_unused_weights: bool,
    /// At most this many tokens in one batch, padding included (batches hold fewer than
    /// --batch-size texts when these are long): what bounds a batch's memory. See
    /// docs/reliability.md for the peak-memory formula.
    #[arg(long, value_name = "N", default_value_t = crate::model::sentence::DEFAULT_MAX_BATCH_TOKENS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_batch_tokens: usize,
    /// Read and tokenise at most this many bytes of a line (1 MiB by default); a longer line is
    /// cut there, counted as truncated and warned about. A line reaches the model's maximum
    /// length long before, unless it is mostly characters the tokenizer drops (NULs, controls,
    /// whitespace runs).
    #[arg(long, value_name = "BYTES", default_value_t = crate::model::sentence::DEFAULT_MAX_TEXT_BYTES, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_line_bytes: usize,
    /// Element type of the encoder at inference: f32 (default); int8 (CPU; weights per channel,
    /// activations per row); bf16 (CPU: linear layers' weights and activations rounded to
    /// bf16, f32 sums; CUDA: the whole encoder in bf16, f32 LayerNorm/softmax statistics); f16
    /// (CUDA only, as bf16 there). See docs/quantization.md and docs/gpu.md.
    #[arg(long, value_enum)]
    pub dtype: Option<crate::model::quant::Dtype>,
}

impl ModelArgs {
    /// The model, on `--device`; the command's exact kNN searches run there too.
    pub fn load(&self) -> anyhow::Result<Box<dyn crate::model::Embedder>> {
        let opts = self.options()?;
        crate::index::knn_gpu::search_on(&opts.device);
        crate::model::load_embedder(&self.spec()?, &opts, self.head.as_deref())
    }

    /// [`Self::load`], counting the texts the model cuts, for commands that say so once
    /// ([`cuts::NotingCuts::say`]) rather than per line.
    pub fn load_noting_cuts(&self) -> anyhow::Result<cuts::NotingCuts> {
        Ok(cuts::NotingCuts::new(self.load()?, self.max_line_bytes))
    }

    /// The model to load: `--model`, else the default model's directory (said once on stderr).
    pub fn spec(&self) -> anyhow::Result<String> {
        if let Some(m) = &self.model {
            return Ok(m.clone());
        }
        let dir = crate::places::default_model()?;
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| errln!("xsent: model {} (the default; --model chooses another)", dir.display()));
        Ok(dir.display().to_string())
    }

    /// These options as a report records them: each flag's value, null where the model's own
    /// setting (or xsent's default) was used.
    pub fn recorded(&self) -> serde_json::Value {
        serde_json::json!({
            "dtype": self.dtype,
            "pooling": self.pooling,
            "max_length": self.max_length,
            "layers": self.layers,
            "normalize": if self.normalize { Some(true) } else if self.no_normalize { Some(false) } else { None },
            "prompt_name": self.prompt_name,
            "head": self.head,
            "device": self.device,
            "max_batch_tokens": self.max_batch_tokens,
            "max_line_bytes": self.max_line_bytes,
            "allow_unused_weights": self.allow_unused_weights,
        })
    }

    /// The load options these flags give.
    pub fn options(&self) -> anyhow::Result<crate::model::LoadOptions> {
        Ok(crate::model::LoadOptions {
            device: crate::device::parse_device(&self.device)?,
            layers: self.layers,
            pooling: self.pooling,
            prefix: self.prefix.clone(),
            prompt_name: self.prompt_name.clone(),
            max_length: self.max_length,
            // Neither flag: as sentence-transformers runs the model (its Normalize module).
            normalize: if self.no_normalize {
                Some(false)
            } else if self.normalize {
                Some(true)
            } else {
                None
            },
            trainable: false,
            allow_unused_weights: self.allow_unused_weights,
            max_batch_tokens: self.max_batch_tokens,
            max_text_bytes: self.max_line_bytes,
            dtype: self.dtype,
        })
    }
}

/// The largest `--batch-size` of `embed` and `mine` (a batch is padded to its longest sentence
/// in memory, and embed reads 32 batches at a time).
const MAX_BATCH: usize = 1 << 16;

/// `--batch-size` of `embed` and `mine`: 1..=[`MAX_BATCH`].
pub fn check_batch_size(n: usize) -> anyhow::Result<()> {
    anyhow::ensure!(
        (1..=MAX_BATCH).contains(&n),
        "--batch-size {n} is out of range: give 1..={MAX_BATCH} (64 is a good start)"
    );
    Ok(())
}

/// Check an output path before any work is done: its folder must exist, it must not be a
/// folder, and it must not be one of the command's input files (creating it would empty that
/// input before it is read).
pub fn check_output(output: &std::path::Path, flag: &str, inputs: &[&std::path::Path]) -> anyhow::Result<()> {
    if output.is_dir() {
        anyhow::bail!("{flag} {} is a folder: give a file path", output.display());
    }
    if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty()) {
        if !parent.is_dir() {
            anyhow::bail!(
                "{flag} {}: the folder {} does not exist (create it first)",
                output.display(),
                parent.display()
            );
        }
    }
    check_not_input(output, flag, inputs)
}

/// Refuse an output path that names one of the input files (hard links and symlinks included).
pub fn check_not_input(output: &std::path::Path, flag: &str, inputs: &[&std::path::Path]) -> anyhow::Result<()> {
    for input in inputs {
        if same_file(output, input) {
            anyhow::bail!(
                "{flag} {} is the input file {}: writing it would destroy the input; give another output path",
                output.display(),
                input.display()
            );
        }
    }
    Ok(())
}

/// Check a report path (`eval --report`, `data audit --json`) before any work: [`check_output`]
/// against the command's input files, not a read-only file (it would be replaced without a
/// word), and not inside the data directory's benchmark and corpus folders (`sts/`,
/// `tatoeba/`, `bucc/`, `parallel/`, `xnli/`), where it could replace one of their files.
pub fn check_report(
    report: &std::path::Path,
    flag: &str,
    inputs: &[&std::path::Path],
    data_dir: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    check_output(report, flag, inputs)?;
    crate::io::output::refuse_read_only(report, report, flag, false)?;
    let Some(dir) = data_dir else { return Ok(()) };
    let parent = report.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let Ok(parent) = parent.canonicalize() else { return Ok(()) };
    for sub in ["sts", "tatoeba", "bucc", "parallel", "xnli"] {
        if dir.join(sub).canonicalize().is_ok_and(|d| parent.starts_with(d)) {
            anyhow::bail!(
                "{flag} {} is inside {}, among the benchmark and corpus files; write it elsewhere",
                report.display(),
                dir.join(sub).display()
            );
        }
    }
    Ok(())
}

/// Whether two paths name the same existing file (hard links and symlinks included).
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) else { return false };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        ma.dev() == mb.dev() && ma.ino() == mb.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (ma, mb);
        matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
    }
}

/// Whether an error comes from writing into a closed pipe (`xsent embed | head`): the reader
/// wanted no more, which is no failure (as in ripgrep).
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

/// Run the CLI; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    // Shared code (config loading, decontamination) prefixes its messages with the command.
    crate::log::set_command(match &cli.command {
        Command::Train(_) => "xsent train",
        Command::Data(data::Command::Audit(_)) => "xsent data audit",
        _ => "xsent",
    });
    match cli.command {
        Command::Embed(_)
        | Command::Eval(_)
        | Command::Mine(_)
        | Command::Train(_)
        | Command::Plot(_)
        | Command::Index(_) => crate::threads::init_data_parallel(),
        Command::Convert(_) | Command::Tokenizer(_) | Command::Config(_) | Command::Data(_) | Command::Quantize(_) => {}
    }
    let result = match cli.command {
        Command::Embed(args) => embed::run(args).map(|()| 0),
        Command::Convert(c) => convert::run(c).map(|()| 0),
        Command::Quantize(a) => quantize::run(a).map(|()| 0),
        Command::Tokenizer(c) => tokenizer::run(c).map(|()| 0),
        Command::Data(c) => data::run(c).map(|()| 0),
        Command::Eval(t) => eval::run(t).map(|()| 0),
        Command::Mine(a) => mine::run(a).map(|()| 0),
        Command::Index(c) => index::run(c).map(|()| 0),
        Command::Train(a) => train::run(a),
        Command::Plot(p) => plot::run(p).map(|()| 0),
        Command::Config(c) => config::run(c).map(|()| 0),
    };
    match result {
        Ok(code) => match crate::log::stdout_failure() {
            // The work is done (reports and files written), but what went to standard output is
            // cut: a redirect into a full disk must not end in exit 0.
            Some(e) if code == 0 => {
                errln!("xsent: error: writing to standard output failed ({e}): what was printed there is incomplete");
                1
            }
            _ => code,
        },
        Err(e) if is_broken_pipe(&e) => 0,
        Err(e) => {
            errln!("xsent: error: {e}");
            for cause in e.chain().skip(1) {
                errln!("  caused by: {cause}");
            }
            1
        }
    }
}

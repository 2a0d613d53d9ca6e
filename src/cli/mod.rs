//! The command line, thin over the library.

mod convert;
mod embed;
mod eval;
mod mine;
mod plot;
mod tokenizer;
mod train;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xsent", version, about = "Multilingual sentence embeddings: embed, evaluate, mine, train, plot, convert")]
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
    /// Draw pictures of embedding spaces (PNG).
    #[command(subcommand)]
    Plot(plot::Plot),
    /// Vocabularies: `xsent tokenizer train` learns a SentencePiece-style one from text.
    #[command(subcommand)]
    Tokenizer(tokenizer::Command),
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
}

impl ModelArgs {
    pub fn load(&self) -> anyhow::Result<Box<dyn crate::model::Embedder>> {
        crate::model::load_embedder(&self.model, &self.options()?, self.head.as_deref())
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
        })
    }
}

/// The largest `--batch-size` of `embed` and `mine` (a batch is padded to its longest sentence
/// in memory, and embed reads 32 batches at a time).
const MAX_BATCH: usize = 1 << 16;

/// `--batch-size` of `embed` and `mine`: 1..=[`MAX_BATCH`].
pub fn check_batch_size(n: usize) -> anyhow::Result<()> {
    anyhow::ensure!((1..=MAX_BATCH).contains(&n), "--batch-size {n} is out of range: give 1..={MAX_BATCH} (64 is a good start)");
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
            anyhow::bail!("{flag} {}: the folder {} does not exist (create it first)", output.display(), parent.display());
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

/// Check `--report` before any work: [`check_output`] against the command's input files, and
/// not inside the benchmark folders of the data directory (`sts/`, `tatoeba/`, `bucc/`,
/// `parallel/`), where it could replace a benchmark file.
pub fn check_report(report: &std::path::Path, inputs: &[&std::path::Path], data_dir: Option<&std::path::Path>) -> anyhow::Result<()> {
    check_output(report, "--report", inputs)?;
    let Some(dir) = data_dir else { return Ok(()) };
    let parent = report.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let Ok(parent) = parent.canonicalize() else { return Ok(()) };
    for sub in ["sts", "tatoeba", "bucc", "parallel"] {
        if dir.join(sub).canonicalize().is_ok_and(|d| parent.starts_with(d)) {
            anyhow::bail!(
                "--report {} is inside {}, among the benchmark files; write the report elsewhere",
                report.display(),
                dir.join(sub).display()
            );
        }
    }
    Ok(())
}

/// Where an `-o` file goes, opened before any work, so that a path that cannot be written fails
/// at once. A regular file (or a new one; through a symlink, its target) is written as a
/// temporary file beside it and moved into place by [`OutputFile::commit`] when the command
/// succeeds, so a failed or interrupted run leaves an earlier file as it was; anything else
/// (`/dev/stdout`, a named pipe, a process substitution) is written directly.
pub(crate) enum OutputFile {
    Temp(tempfile::NamedTempFile, std::path::PathBuf),
    Direct(std::fs::File),
}

impl OutputFile {
    pub(crate) fn open(out: &std::path::Path) -> anyhow::Result<Self> {
        use anyhow::Context;
        // Through symlinks to the file they name (a dangling link: where it points).
        let target = match std::fs::canonicalize(out) {
            Ok(t) => t,
            Err(_) => match std::fs::read_link(out) {
                Ok(link) => out.parent().unwrap_or(std::path::Path::new(".")).join(link),
                Err(_) => out.to_path_buf(),
            },
        };
        if target.exists() && !target.is_file() {
            let f = std::fs::OpenOptions::new().write(true).open(out).with_context(|| format!("-o {}: cannot open it for writing", out.display()))?;
            return Ok(Self::Direct(f));
        }
        let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        let mut builder = tempfile::Builder::new();
        builder.prefix(".xsent-out-");
        // As a file the shell creates (0666 less the umask), not a temporary file's 0600.
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
        let tmp = builder.tempfile_in(dir).with_context(|| format!("-o {}: cannot create a file in {}", out.display(), dir.display()))?;
        // Ctrl-C ends the process without running destructors: remove the temporary file
        // first, and exit as an interrupted command does (130).
        let path = tmp.path().to_path_buf();
        ctrlc::set_handler(move || {
            let _ = std::fs::remove_file(&path);
            std::process::exit(130);
        })
        .context("cannot set the Ctrl-C handler")?;
        Ok(Self::Temp(tmp, target))
    }

    /// The open file to write.
    pub(crate) fn file(&self) -> &std::fs::File {
        match self {
            Self::Temp(t, _) => t.as_file(),
            Self::Direct(f) => f,
        }
    }

    /// The command succeeded: move what was written into place.
    pub(crate) fn commit(self) -> anyhow::Result<()> {
        if let Self::Temp(t, path) = self {
            t.persist(&path).map_err(|e| anyhow::anyhow!("cannot move the output into place at {}: {}", path.display(), e.error))?;
        }
        Ok(())
    }

    /// The command failed part-way: keep what was written as `FILE.partial` beside the output,
    /// which is left as it was. Returns the pair (output, partial file); None for a direct output.
    pub(crate) fn keep_partial(self) -> anyhow::Result<Option<(std::path::PathBuf, std::path::PathBuf)>> {
        let Self::Temp(t, path) = self else { return Ok(None) };
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(".partial");
        let partial = path.with_file_name(name);
        t.persist(&partial).map_err(|e| anyhow::anyhow!("cannot keep the partial output as {}: {}", partial.display(), e.error))?;
        Ok(Some((path, partial)))
    }
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
    match cli.command {
        Command::Embed(_) | Command::Eval(_) | Command::Mine(_) | Command::Train(_) | Command::Plot(_) => crate::parallel::init_data_parallel(),
        Command::Convert(_) | Command::Tokenizer(_) => {}
    }
    let result = match cli.command {
        Command::Embed(args) => embed::run(args).map(|()| 0),
        Command::Convert(c) => convert::run(c).map(|()| 0),
        Command::Tokenizer(c) => tokenizer::run(c).map(|()| 0),
        Command::Eval(t) => eval::run(t).map(|()| 0),
        Command::Mine(a) => mine::run(a).map(|()| 0),
        Command::Train(a) => train::run(a),
        Command::Plot(p) => plot::run(p).map(|()| 0),
    };
    match result {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => 0,
        Err(e) => {
            eprintln!("xsent: error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            1
        }
    }
}

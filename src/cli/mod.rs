//! The command line, thin over the library.

mod config;
mod convert;
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
    /// Default: multilingual-e5-small in $XSENT_MODELS, else ~/.cache/xsent/models (where
    /// scripts/setup.sh installs it).
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

/// Check `--report` before any work: [`check_output`] against the command's input files, and
/// not inside the benchmark folders of the data directory (`sts/`, `tatoeba/`, `bucc/`,
/// `parallel/`), where it could replace a benchmark file.
pub fn check_report(
    report: &std::path::Path,
    inputs: &[&std::path::Path],
    data_dir: Option<&std::path::Path>,
) -> anyhow::Result<()> {
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
/// temporary file beside it, with the permissions of the file it replaces, and moved into place
/// by [`OutputFile::commit`] when the command succeeds, so a failed or interrupted run leaves an
/// earlier file as it was. `/dev/stdout` and `/dev/stderr` (and their `/dev/fd/N` and
/// `/proc/self/fd/N` names) write to the process's own standard output or error, whatever file
/// that is; anything else that is not a regular file (a named pipe, a process substitution, a
/// device) is written directly.
pub(crate) enum OutputFile {
    Temp(tempfile::NamedTempFile, std::path::PathBuf),
    Direct(std::fs::File),
}

/// Temporary output files to remove on Ctrl-C, which ends the process without running
/// destructors. The handler holds the lock until the process exits, and [`OutputFile::commit`]
/// and [`OutputFile::keep_partial`] hold it while they move a file, so each file is dealt with
/// once.
static ON_INTERRUPT: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());

/// The list of [`ON_INTERRUPT`], locked (a panic elsewhere leaves it usable).
fn pending() -> std::sync::MutexGuard<'static, Vec<std::path::PathBuf>> {
    ON_INTERRUPT.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Take `tmp` off the Ctrl-C list, returning the lock for the caller to hold while it moves the file.
fn unregister(tmp: &std::path::Path) -> std::sync::MutexGuard<'static, Vec<std::path::PathBuf>> {
    let mut p = pending();
    p.retain(|f| f != tmp);
    p
}

/// Install the process's one handler of Ctrl-C, SIGTERM and SIGHUP for outputs (on first use):
/// it removes every registered temporary file, lets a write of whole rows in progress end
/// ([`crate::whole_rows`]), and exits as an interrupted command does (130).
pub(crate) fn interrupt_handler() -> anyhow::Result<()> {
    static HANDLER: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    HANDLER
        .get_or_init(|| {
            ctrlc::set_handler(|| {
                let files = pending();
                for tmp in files.iter() {
                    let _ = std::fs::remove_file(tmp);
                }
                // Rows being passed to a pipe or terminal are let through whole.
                if !crate::whole_rows::close_gate() {
                    errln!(
                        "xsent: interrupted while the output's reader took nothing for {} s: the output may end in a cut row",
                        crate::whole_rows::GATE_WAIT.as_secs()
                    );
                }
                std::process::exit(130);
            })
            .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| anyhow::anyhow!("cannot set the Ctrl-C handler: {e}"))
}

/// How the temporary files of outputs begin: `.xsent-out-PID-HOST.RANDOM`.
const TEMP_PREFIX: &str = ".xsent-out-";

/// Remove the temporary outputs in `dir` left by xsent processes of this machine that are gone
/// (killed with `kill -9`, or by the OOM killer), saying so. Best effort: on systems without
/// /proc nothing is removed.
fn remove_stale_temporaries(dir: &std::path::Path) {
    if !std::path::Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let host = crate::train::lock::host();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(TEMP_PREFIX)) else { continue };
        let Some((pid, rest)) = rest.split_once('-') else { continue };
        let Some((their_host, _)) = rest.rsplit_once('.') else { continue };
        if their_host != host || pid.parse::<u32>().is_err() || std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if std::fs::remove_file(e.path()).is_ok() {
            errln!(
                "xsent: removed {}, the unfinished output of xsent process {pid}, which is gone",
                e.path().display()
            );
        }
    }
}

/// `FILE.partial` beside `path`.
pub(crate) fn partial_path(path: &std::path::Path) -> std::path::PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    path.with_file_name(name)
}

/// The standard stream (1 or 2) that `out` names, if it names one.
fn std_stream(out: &std::path::Path) -> Option<i32> {
    let s = out.to_str()?;
    match s {
        "/dev/stdout" | "/dev/fd/1" | "/proc/self/fd/1" => Some(1),
        "/dev/stderr" | "/dev/fd/2" | "/proc/self/fd/2" => Some(2),
        _ => None,
    }
}

impl OutputFile {
    /// Open `-o out`; a read-only file (no write permission for anyone) is refused unless
    /// `force` (`--force`): its mode says it is not to be replaced, and root's writes ignore it.
    pub(crate) fn open(out: &std::path::Path, force: bool) -> anyhow::Result<Self> {
        use anyhow::Context;
        #[cfg(unix)]
        if let Some(fd) = std_stream(out) {
            // The same open file as the stream (its offset, its append mode), not a new one.
            use std::os::fd::AsFd;
            let owned = match fd {
                1 => std::io::stdout().as_fd().try_clone_to_owned(),
                _ => std::io::stderr().as_fd().try_clone_to_owned(),
            }
            .with_context(|| format!("-o {}: cannot open it for writing", out.display()))?;
            return Ok(Self::Direct(std::fs::File::from(owned)));
        }
        // Through symlinks to the file they name (a dangling link: where it points).
        let target = match std::fs::canonicalize(out) {
            Ok(t) => t,
            Err(_) => match std::fs::read_link(out) {
                Ok(link) => out.parent().unwrap_or(std::path::Path::new(".")).join(link),
                Err(_) => out.to_path_buf(),
            },
        };
        if !force && std::fs::metadata(&target).is_ok_and(|m| m.is_file() && m.permissions().readonly()) {
            anyhow::bail!(
                "-o {} is read-only: xsent does not replace a read-only file; give another path, make it writable (chmod u+w), \
                 or pass --force to replace it",
                out.display()
            );
        }
        if target.exists() && !target.is_file() {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(out)
                .with_context(|| format!("-o {}: cannot open it for writing", out.display()))?;
            return Ok(Self::Direct(f));
        }
        let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        // Before the file exists: a Ctrl-C after it is made finds the handler in place.
        interrupt_handler()?;
        remove_stale_temporaries(dir);
        let mut builder = tempfile::Builder::new();
        // Named by the process and machine that write it, so that a later run can tell a file
        // left by a killed one (`kill -9` runs no handler) from one being written.
        let prefix = format!("{TEMP_PREFIX}{}-{}.", std::process::id(), crate::train::lock::host());
        builder.prefix(&prefix);
        // As a file the shell creates (0666 less the umask), not a temporary file's 0600.
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
        let tmp = builder
            .tempfile_in(dir)
            .with_context(|| format!("-o {}: cannot create a file in {}", out.display(), dir.display()))?;
        pending().push(tmp.path().to_path_buf());
        // A replaced file's own permissions, where the file system lets us (best effort).
        if let Ok(m) = std::fs::metadata(&target) {
            let _ = std::fs::set_permissions(tmp.path(), m.permissions());
        }
        Ok(Self::Temp(tmp, target))
    }

    /// The open file to write.
    pub(crate) fn file(&self) -> &std::fs::File {
        match self {
            Self::Temp(t, _) => t.as_file(),
            Self::Direct(f) => f,
        }
    }

    /// Whether the output is written under a temporary name (and so can be kept apart).
    pub(crate) fn is_temporary(&self) -> bool {
        matches!(self, Self::Temp(..))
    }

    /// The command succeeded: move what was written into place. Where that rename fails (a
    /// bind-mounted file, a sticky directory), what was written is kept as `FILE.partial`, FILE
    /// is left as it was, and the error says so.
    pub(crate) fn commit(self) -> anyhow::Result<()> {
        let Self::Temp(t, path) = self else { return Ok(()) };
        let _held = unregister(t.path());
        let e = match t.persist(&path) {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        let kept = keep(e.file, &partial_path(&path))?;
        anyhow::bail!(
            "cannot move the output into place at {} ({}): it is left as it was, and the output is in {}",
            path.display(),
            e.error,
            kept.display()
        )
    }

    /// The command failed part-way: keep what was written as `FILE.partial` beside the output,
    /// which is left as it was, and return where it is; when nothing was written, remove it and
    /// return None. (A direct output has nothing to keep apart: None.)
    pub(crate) fn keep_partial(self, written: bool) -> anyhow::Result<Option<std::path::PathBuf>> {
        let Self::Temp(t, path) = self else { return Ok(None) };
        let _held = unregister(t.path());
        if !written {
            return Ok(None);
        }
        keep(t, &partial_path(&path)).map(Some)
    }
}

/// Keep a temporary file as `partial`, or where that exists (an earlier run's rows) as the first
/// free `partial.1`, `partial.2`, …, or where that fails under its own name: never delete it,
/// nor replace anything.
fn keep(t: tempfile::NamedTempFile, partial: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    let mut t = t;
    for i in 0u32.. {
        let name = if i == 0 {
            partial.to_path_buf()
        } else {
            let mut n = partial.as_os_str().to_os_string();
            n.push(format!(".{i}"));
            n.into()
        };
        match t.persist_noclobber(&name) {
            Ok(_) => return Ok(name),
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => t = e.file,
            Err(e) => {
                t = e.file;
                break;
            }
        }
    }
    t.into_temp_path().keep().map_err(|e| anyhow::anyhow!("cannot keep the output: {}", e.error))
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
        Ok(code) => code,
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

#[cfg(test)]
mod tests {
    use super::OutputFile;
    use std::io::Write;

    /// What was written is never lost: committed into place, kept as FILE.partial when the
    /// file cannot take it (here a folder put in its place), dropped only when nothing was
    /// written.
    #[test]
    fn an_output_file_is_committed_or_kept() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("v.txt");
        std::fs::write(&out, "earlier").unwrap();
        let f = OutputFile::open(&out, false).unwrap();
        assert!(f.is_temporary());
        f.file().write_all(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "earlier", "replaced only at the end");
        f.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "new");

        let blocked = dir.path().join("w.txt");
        let f = OutputFile::open(&blocked, false).unwrap();
        f.file().write_all(b"rows").unwrap();
        std::fs::create_dir_all(blocked.join("in-the-way")).unwrap();
        let e = format!("{:#}", f.commit().unwrap_err());
        assert!(e.contains("it is left as it was, and the output is in") && e.contains("w.txt.partial"), "{e}");
        assert_eq!(std::fs::read_to_string(dir.path().join("w.txt.partial")).unwrap(), "rows");

        let f = OutputFile::open(&dir.path().join("x.txt"), false).unwrap();
        assert_eq!(f.keep_partial(false).unwrap(), None);
        let f = OutputFile::open(&dir.path().join("y.txt"), false).unwrap();
        f.file().write_all(b"some").unwrap();
        assert_eq!(f.keep_partial(true).unwrap(), Some(dir.path().join("y.txt.partial")));
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with(".xsent-out-")), "{names:?}");
        assert!(!dir.path().join("x.txt").exists() && !dir.path().join("x.txt.partial").exists());
        assert!(
            super::ON_INTERRUPT.lock().unwrap().is_empty(),
            "every file dealt with is forgotten by the Ctrl-C handler"
        );
        // A named pipe or device is written directly.
        assert!(!OutputFile::open(std::path::Path::new("/dev/null"), false).unwrap().is_temporary());
    }
}

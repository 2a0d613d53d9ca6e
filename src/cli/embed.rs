use super::ModelArgs;
use crate::embed::{embed_stream, Format, Limits, Sink};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::BufRead;
use std::path::PathBuf;

/// Bytes of text read before they are embedded together (with 32 batches' worth of lines, the
/// bound on the window: see docs/reliability.md).
pub const WINDOW_BYTES: usize = 16 << 20;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Read sentences from this file instead of stdin (`-`: stdin).
    #[arg(long, short = 'i')]
    input: Option<PathBuf>,
    /// Write vectors here instead of stdout (`-`: stdout; npy needs a regular file).
    #[arg(long, short = 'o')]
    output: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "jsonl")]
    format: Format,
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Replace -o FILE even when it is read-only.
    #[arg(long)]
    force: bool,
}

pub fn run(args: Args) -> Result<()> {
    super::check_batch_size(args.batch_size)?;
    // `-o -` is standard output, as `--input -` is standard input.
    let output = args.output.as_deref().filter(|p| p.as_os_str() != "-");
    anyhow::ensure!(
        output.is_some() || args.format != Format::Npy,
        "--format npy needs -o FILE (the header, which holds the row count, is written last)"
    );
    if let Some(out) = output {
        let stdin_file = stdin_regular_file();
        let inputs: Vec<&std::path::Path> = match args.input.as_deref().filter(|p| p.as_os_str() != "-") {
            Some(p) => vec![p],
            // `xsent embed -o sents.txt < sents.txt`: creating the output would empty the input
            // that standard input reads.
            None => stdin_file.iter().map(PathBuf::as_path).collect(),
        };
        super::check_output(out, "-o", &inputs)?;
    }
    // The input is opened before the model loads, so a bad path is reported at once.
    let file = args.input.as_deref().filter(|p| p.as_os_str() != "-");
    let source = file.map_or_else(|| "stdin".to_string(), |p| p.display().to_string());
    let (reader, total): (Box<dyn BufRead>, Option<u64>) = match file {
        Some(p) => {
            anyhow::ensure!(!p.is_dir(), "--input {} is a folder: give a file with one sentence per line", p.display());
            let f = std::fs::File::open(p).with_context(|| format!("cannot open input {}", p.display()))?;
            if p.extension().is_some_and(|e| e == "gz") {
                // Read through gzip, as the other commands read `.gz` files (no byte total for
                // the progress bar: the file's size is not the text's).
                let mut raw = std::io::BufReader::new(f);
                let head = raw.fill_buf().with_context(|| format!("cannot read input {}", p.display()))?;
                anyhow::ensure!(
                    head.is_empty() || head.starts_with(&[0x1f, 0x8b]),
                    "--input {}: the name ends in .gz, but the file is not gzip-compressed (rename it if it is plain text)",
                    p.display()
                );
                let gz = flate2::read::MultiGzDecoder::new(raw);
                (Box::new(std::io::BufReader::with_capacity(1 << 20, gz)), None)
            } else {
                let len = f.metadata().map(|m| m.len()).ok();
                (Box::new(std::io::BufReader::with_capacity(1 << 20, f)), len)
            }
        }
        _ => (Box::new(std::io::BufReader::with_capacity(1 << 20, std::io::stdin().lock())), None),
    };
    // Opened before the model loads: a path that cannot be written fails at once.
    let out_file = output.map(|o| super::OutputFile::open(o, args.force)).transpose()?;
    // Ctrl-C (SIGTERM, SIGHUP) removes a temporary output file, and lets rows being written to
    // a pipe or terminal through whole.
    super::interrupt_handler()?;
    let enc = args.model.load()?;
    let to = match (&out_file, output) {
        (Some(f), Some(p)) => Some((f.file().try_clone().with_context(|| format!("cannot write {}", p.display()))?, p.display().to_string())),
        _ => None,
    };
    let mut sink = Sink::new(args.format, to, enc.dim())?;
    let bar = match total {
        Some(t) => ProgressBar::new(t).with_style(
            ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {percent}% ETA {eta}").expect("valid template"),
        ),
        None => ProgressBar::new_spinner()
            .with_style(ProgressStyle::with_template("{spinner} {msg}").expect("valid template")),
    };
    let start = std::time::Instant::now();
    let progress = |lines: u64, bytes: u64| {
        bar.set_position(bytes);
        let rate = lines as f64 / start.elapsed().as_secs_f64().max(1e-9);
        bar.set_message(format!("{lines} lines, {rate:.0} lines/s"));
    };
    let limits = Limits {
        batch_size: args.batch_size,
        window: (args.batch_size * 32).max(1024),
        window_bytes: WINDOW_BYTES,
        max_line_bytes: args.model.max_line_bytes,
    };
    let result = embed_stream(enc.as_ref(), reader, &mut sink, limits, &progress)
        .with_context(|| format!("embedding {source}"));
    bar.finish_and_clear();
    // Whatever was embedded before an error is written out (npy header included): into the
    // output file on success, else beside it as FILE.partial, the output left as it was.
    let written = sink.rows() > 0;
    let finished = sink.finish();
    let summary = match (result, finished) {
        (Ok(summary), Ok(())) => {
            if let Some(f) = out_file {
                f.commit()?;
            }
            summary
        }
        (Err(e), _) | (Ok(_), Err(e)) => {
            if let (Some(f), Some(out)) = (out_file.filter(super::OutputFile::is_temporary), output) {
                let state = if out.exists() { "is left as it was" } else { "is not written" };
                match f.keep_partial(written) {
                    Ok(Some(partial)) => {
                        let plain = super::partial_path(out);
                        // Both lie in one folder (`partial` named from the absolute path).
                        let earlier = if partial.file_name() == plain.file_name() { String::new() } else { format!(" ({} holds an earlier run's rows and is left as it was)", plain.display()) };
                        errln!("xsent embed: stopped; {} {state}, and the rows written before the error are in {}{earlier}", out.display(), partial.display())
                    }
                    Ok(None) => errln!("xsent embed: stopped before any row; {} {state}", out.display()),
                    // The embedding error is the one to report.
                    Err(k) => errln!("xsent embed: stopped; {} {state}; {k:#}", out.display()),
                }
            }
            return Err(e);
        }
    };
    if summary.cut > 0 {
        errln!(
            "xsent embed: {} of {} lines were longer than {} bytes and only their first {} bytes were read and embedded \
             (first: line {}); --max-line-bytes reads more of them",
            summary.cut,
            summary.lines,
            args.model.max_line_bytes,
            args.model.max_line_bytes,
            summary.first_cut.unwrap_or(0)
        );
    }
    if summary.truncated > 0 {
        errln!(
            "xsent embed: {} of {} lines were longer than {} tokens and were truncated (first: line {})",
            summary.truncated,
            summary.lines,
            enc.max_length().map_or_else(|| "the model's maximum".to_string(), |n| n.to_string()),
            summary.first_truncated.unwrap_or(0)
        );
    }
    Ok(())
}

/// The file standard input reads, when it is a regular file (`< FILE`); None for a pipe, a
/// terminal or a device such as /dev/null.
fn stdin_regular_file() -> Option<PathBuf> {
    #[cfg(unix)]
    {
        let p = PathBuf::from("/dev/stdin");
        std::fs::metadata(&p).ok().filter(std::fs::Metadata::is_file).map(|_| p)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

use super::ModelArgs;
use crate::embed::{embed_stream, Format, Limits, Sink, DEFAULT_WINDOW_BYTES};
use crate::shard::ShardSpec;
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{BufRead, Read, Seek};
use std::path::{Path, PathBuf};

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
    /// Batches are formed within windows of the lines that start in one span of this many bytes
    /// of the input; runs with the same --batch-size and --window-bytes give the same vectors,
    /// sharded or not.
    #[arg(long, default_value_t = DEFAULT_WINDOW_BYTES)]
    window_bytes: u64,
    /// Embed only shard i of N (counted from 0) of --input FILE: a range of its bytes, found
    /// without reading what comes before. Writes DIR/shard-0000I-of-0000N.FORMAT (five digits
    /// each) and its manifest into --out-dir DIR; a shard whose manifest matches is skipped.
    #[arg(long, value_name = "i/N", requires = "out_dir", requires = "input", conflicts_with = "output")]
    shard: Option<ShardSpec>,
    /// The folder of a sharded run (made if missing).
    #[arg(long, value_name = "DIR", requires = "shard")]
    out_dir: Option<PathBuf>,
    /// Check the manifests of a sharded run in DIR and join its shards, in order, into -o FILE
    /// (or stdout): the same bytes as one run over the whole input.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["input", "shard", "batch_size", "window_bytes"])]
    merge: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    if let Some(dir) = &args.merge {
        anyhow::ensure!(args.model.model.is_none(), "--merge DIR joins vectors already made: it takes no --model");
        return merge(dir, args.output.as_deref().filter(|p| p.as_os_str() != "-"));
    }
    let model = args.model.clone();
    super::check_batch_size(args.batch_size)?;
    anyhow::ensure!(args.window_bytes > 0, "--window-bytes must be at least 1 (the default is {DEFAULT_WINDOW_BYTES})");
    if let Some(spec) = args.shard {
        return run_shard(&args, &model, spec);
    }
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
    let out_file = output.map(|o| crate::io::output::OutputFile::open(o, args.force)).transpose()?;
    // Ctrl-C (SIGTERM, SIGHUP) removes a temporary output file, and lets rows being written to
    // a pipe or terminal through whole.
    crate::io::output::interrupt_handler()?;
    let enc = model.load()?;
    let to = match (&out_file, output) {
        (Some(f), Some(p)) => Some((
            f.file().try_clone().with_context(|| format!("cannot write {}", p.display()))?,
            p.display().to_string(),
        )),
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
    let limits = limits(&args, 0);
    let result =
        embed_stream(enc.as_ref(), reader, &mut sink, limits, &progress).with_context(|| format!("embedding {source}"));
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
            if let (Some(f), Some(out)) = (out_file.filter(crate::io::output::OutputFile::is_temporary), output) {
                let state = if out.exists() { "is left as it was" } else { "is not written" };
                match f.keep_partial(written) {
                    Ok(Some(partial)) => {
                        let plain = crate::io::output::partial_path(out);
                        // Both lie in one folder (`partial` named from the absolute path).
                        let earlier = if partial.file_name() == plain.file_name() {
                            String::new()
                        } else {
                            format!(" ({} holds an earlier run's rows and is left as it was)", plain.display())
                        };
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
    note_truncated(&summary, enc.as_ref(), "", model.max_line_bytes);
    Ok(())
}

/// Most lines in one window: 32 batches, at least 1,024 lines.
fn window_lines(batch_size: usize) -> usize {
    (batch_size * 32).max(1024)
}

/// The windows and caps of one embedding run over input that starts at byte `start` of its file.
fn limits(args: &Args, start: u64) -> Limits {
    Limits {
        batch_size: args.batch_size,
        window: window_lines(args.batch_size),
        window_bytes: WINDOW_BYTES,
        max_line_bytes: args.model.max_line_bytes,
        span: args.window_bytes,
        start,
    }
}

fn note_truncated(
    summary: &crate::embed::Summary,
    enc: &dyn crate::model::Embedder,
    of_shard: &str,
    max_line_bytes: usize,
) {
    let what = format!("lines{of_shard}");
    let cut = super::cuts::Cut {
        command: "xsent embed",
        what: &what,
        texts: summary.lines,
        max_line_bytes,
        max_length: enc.max_length(),
    };
    let line = |n: Option<u64>| format!("line {}{of_shard}", n.unwrap_or(0));
    let (first_cut, first_truncated) = (line(summary.first_cut), line(summary.first_truncated));
    for m in cut.messages(Some((summary.cut, first_cut.as_str())), Some((summary.truncated, first_truncated.as_str())))
    {
        errln!("{m}");
    }
}

/// The output format's file extension.
fn extension(f: Format) -> &'static str {
    match f {
        Format::Jsonl => "jsonl",
        Format::Npy => "npy",
        Format::F32 => "f32",
    }
}

/// The options of a sharded run that change its vectors or files: a shard made with others
/// belongs to another run.
fn shard_options(args: &Args, model: &ModelArgs) -> serde_json::Map<String, serde_json::Value> {
    let o = serde_json::json!({
        "prefix": model.prefix,
        "prompt_name": model.prompt_name,
        "pooling": model.pooling.map(|p| format!("{p:?}").to_lowercase()),
        "max_length": model.max_length,
        "normalize": if model.no_normalize { Some(false) } else if model.normalize { Some(true) } else { None },
        "layers": model.layers,
        "head": model.head,
        "device": model.device,
        "batch_size": args.batch_size,
        "window_bytes": args.window_bytes,
        "format": extension(args.format),
    });
    let serde_json::Value::Object(map) = o else { unreachable!("a JSON object") };
    map
}

/// `--shard i/N --out-dir DIR`: embed one byte range of the input into DIR, with a manifest;
/// skip it when DIR holds it done already.
fn run_shard(args: &Args, model: &ModelArgs, spec: ShardSpec) -> Result<()> {
    let started = std::time::Instant::now();
    let input = args
        .input
        .as_deref()
        .filter(|p| p.as_os_str() != "-")
        .context("--shard needs --input FILE (standard input cannot be cut into byte ranges)")?;
    let dir = args.out_dir.as_deref().context("--shard needs --out-dir DIR")?;
    anyhow::ensure!(
        input.is_file(),
        "--input {}: {} (--shard reads byte ranges of a regular file)",
        input.display(),
        if input.exists() { "not a regular file" } else { "no such file" }
    );
    if input.extension().is_some_and(|e| e == "gz") {
        anyhow::bail!(
            "--input {}: --shard cannot seek in a gzip file (it decompresses only from its start); \
             decompress it first (gunzip -k), or split the text into several files and embed each",
            input.display()
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("--out-dir {}: cannot create it", dir.display()))?;
    let run = crate::shard::RunId {
        spec,
        input: crate::shard::InputId::of(input)?,
        model: crate::shard::ModelId::of(&model.spec()?)?,
        options: shard_options(args, model),
    };
    let out = dir.join(format!("{}.{}", spec.stem(), extension(args.format)));
    super::check_not_input(&out, "--out-dir", &[input])?;
    // One run of a shard at a time: a second (other options, say) would replace the first's
    // output while it writes, and both would exit 0. Held until this function returns.
    let _lock = crate::io::lock::RunLock::acquire_file(
        &dir.join(format!(".{}.lock", spec.stem())),
        &format!("shard {spec} in {}", dir.display()),
        "xsent embed",
        "give --out-dir another folder",
    )?;
    if let Some(m) = crate::shard::done(dir, &run)? {
        errln!(
            "xsent embed: shard {spec} is done already ({} rows, {} checked against its manifest); skipped",
            m.rows,
            out.display()
        );
        return Ok(());
    }
    let partial = out.with_file_name(format!("{}.partial", out.file_name().unwrap_or_default().to_string_lossy()));
    let _ = std::fs::remove_file(&partial);
    let mut file = std::fs::File::open(input).with_context(|| format!("cannot open input {}", input.display()))?;
    let (start, end) = crate::shard::byte_range(&mut file, run.input.size, spec, args.window_bytes)?;
    file.seek(std::io::SeekFrom::Start(start))?;
    let mut reader =
        crate::shard::HashingReader::new(std::io::BufReader::with_capacity(1 << 20, file.take(end - start)));
    let out_file = crate::io::output::OutputFile::open(&out, args.force)?;
    crate::io::output::interrupt_handler()?;
    let enc = model.load()?;
    let handle = out_file.file().try_clone().with_context(|| format!("cannot write {}", out.display()))?;
    let mut sink = Sink::new(args.format, Some((handle, out.display().to_string())), enc.dim())?;
    let result =
        embed_stream(enc.as_ref(), &mut reader, &mut sink, limits(args, start), &|_, _| {}).with_context(|| {
            format!(
                "shard {spec} of {} (bytes {start}..{end}; its line numbers count from byte {start})",
                input.display()
            )
        });
    let written = sink.rows() > 0;
    let finished = sink.finish();
    let summary = match (result, finished) {
        (Ok(s), Ok(())) => s,
        (Err(e), _) | (Ok(_), Err(e)) => {
            if let Ok(Some(p)) = out_file.keep_partial(written) {
                errln!("xsent embed: shard {spec} stopped; its rows so far are in {} (the next run of the shard redoes it)", p.display());
            }
            return Err(e);
        }
    };
    out_file.commit()?;
    let (sha256, bytes) = crate::shard::sha256_file(&out)?;
    let manifest = crate::shard::Manifest {
        xsent_shard_manifest: crate::shard::MANIFEST_VERSION,
        xsent_version: crate::VERSION.to_string(),
        shard: spec.index,
        shards: spec.count,
        input: run.input,
        bytes: [start, end],
        input_sha256: reader.digest(),
        rows: summary.lines,
        model: run.model,
        options: run.options,
        output: crate::shard::OutputId {
            file: out.file_name().unwrap_or_default().to_string_lossy().into_owned(),
            format: extension(args.format).to_string(),
            dim: enc.dim(),
            bytes,
            sha256,
        },
        truncated: summary.truncated,
        seconds: started.elapsed().as_secs_f64(),
        host: hostname(),
    };
    manifest.write(&spec.manifest_path(dir))?;
    note_truncated(&summary, enc.as_ref(), " of the shard", model.max_line_bytes);
    errln!(
        "xsent embed: shard {spec}: {} lines (bytes {start}..{end}) in {:.1} s -> {}",
        summary.lines,
        manifest.seconds,
        out.display()
    );
    Ok(())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default()
}

/// `--merge DIR [-o FILE]`: check every manifest, then join the shards in order.
fn merge(dir: &Path, output: Option<&Path>) -> Result<()> {
    let manifests = crate::shard::manifests_for_merge(dir)?;
    let format = manifests[0].output.format.clone();
    anyhow::ensure!(
        output.is_some() || format != "npy",
        "the shards are .npy files: give -o FILE for the merged .npy (its header is written first)"
    );
    if let Some(out) = output {
        // The text the shards were embedded from is an input too (its path as the manifest has it).
        let source = std::path::Path::new(&manifests[0].input.path);
        super::check_output(out, "-o", &[source])?;
        // Nor a shard's output or manifest (a merge onto a manifest would end later merges).
        let shard_files: Vec<PathBuf> = manifests
            .iter()
            .flat_map(|m| {
                let spec = crate::shard::ShardSpec { index: m.shard, count: m.shards };
                [dir.join(&m.output.file), spec.manifest_path(dir)]
            })
            .collect();
        super::check_not_input(out, "-o", &shard_files.iter().map(PathBuf::as_path).collect::<Vec<_>>())?;
    } else {
        // Standard output cannot be taken back: every shard is checked (size, sha256, rows)
        // before a byte is written, at the cost of reading the shards twice.
        crate::shard::join(dir, &manifests, &mut std::io::sink())?;
    }
    let out_file = output.map(|o| crate::io::output::OutputFile::open(o, false)).transpose()?;
    crate::io::output::interrupt_handler()?;
    let result = {
        let mut w: Box<dyn std::io::Write> = match &out_file {
            Some(f) => Box::new(std::io::BufWriter::with_capacity(1 << 20, f.file())),
            None => Box::new(std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock())),
        };
        crate::shard::join(dir, &manifests, &mut w).and_then(|rows| w.flush().map(|()| rows).map_err(Into::into))
    };
    match result {
        Ok(rows) => {
            if let Some(f) = out_file {
                f.commit()?;
            }
            errln!("xsent embed: merged {} shards of {}: {rows} rows", manifests.len(), manifests[0].input.path);
            Ok(())
        }
        Err(e) => {
            // A merge that failed a check leaves nothing behind.
            if let Some(f) = out_file {
                let _ = f.keep_partial(false);
            }
            Err(e)
        }
    }
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

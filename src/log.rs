//! Messages on the terminal that never stop the work.
//!
//! `eprintln!` and `println!` panic when their stream is closed (`xsent train 2>&1 | head -2`),
//! which would kill a run over a log line. Every message goes through [`errln!`](crate::errln)
//! (standard error) or [`outln!`](crate::outln) / [`out!`](crate::out) (standard output)
//! instead: a write that fails is dropped and the work goes on; a failed write to standard
//! output other than a closed pipe makes the command's exit status 1 at its end. (clippy.toml
//! forbids the std macros.) Results written as data (vectors, mined pairs) do not go through
//! here: a closed output there is an error, or the reader's wish to stop (`xsent embed | head`).

use std::io::Write;

/// Write to standard error, ignoring a closed or failing stream.
pub fn err(args: std::fmt::Arguments) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// Write to standard output and flush it; a failing stream does not stop the work, but a failure
/// other than a closed pipe (a full disk under `xsent config show > my.toml`) is kept for
/// [`stdout_failure`], so that the command ends with an error rather than exit 0 over a cut file.
pub fn out(args: std::fmt::Arguments) {
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_fmt(args).and_then(|()| o.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            let _ = STDOUT_FAILURE.set(e.to_string());
        }
    }
}

static STDOUT_FAILURE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The first failed write to standard output through [`out`] (a closed pipe aside), if any.
pub fn stdout_failure() -> Option<&'static str> {
    STDOUT_FAILURE.get().map(String::as_str)
}

static COMMAND: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Name the running command (`xsent train`, `xsent data audit`) for messages of code that several
/// commands share (config loading, decontamination); set once, at the start.
pub fn set_command(name: &'static str) {
    let _ = COMMAND.set(name);
}

/// The running command's name for a message's prefix: `xsent` until [`set_command`] names it.
pub fn command() -> &'static str {
    COMMAND.get().copied().unwrap_or("xsent")
}

/// `eprintln!` that never panics: a line on standard error, dropped if it cannot be written.
#[macro_export]
macro_rules! errln {
    () => {
        $crate::log::err(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::log::err(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `println!` that never panics: a line on standard output, dropped if it cannot be written.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::log::out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::log::out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that never panics.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::log::out(format_args!($($arg)*))
    };
}

//! Messages on the terminal that never stop the work.
//!
//! `eprintln!` and `println!` panic when their stream is closed (`xsent train 2>&1 | head -2`),
//! which would kill a run over a log line. Every message goes through [`errln!`](crate::errln)
//! (standard error) or [`outln!`](crate::outln) / [`out!`](crate::out) (standard output)
//! instead: a write that fails is dropped and the work goes on. (clippy.toml forbids the std
//! macros.) Results written as data (vectors, mined pairs) do not go through here: a closed
//! output there is an error, or the reader's wish to stop (`xsent embed | head`).

use std::io::Write;

/// Write to standard error, ignoring a closed or failing stream.
pub fn err(args: std::fmt::Arguments) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// Write to standard output and flush it, ignoring a closed or failing stream.
pub fn out(args: std::fmt::Arguments) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_fmt(args).and_then(|()| o.flush());
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

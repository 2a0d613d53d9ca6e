//! Output handed on in whole rows, so that an interrupted command never ends its output with a
//! cut row.
//!
//! A buffered writer passes its buffer on when it is full, at any byte: killed between two
//! writes, `xsent embed --format f32 | consumer` left the consumer a cut row. Here rows are
//! gathered whole and passed on (write and flush) under [`WRITE_GATE`]; the interrupt handler
//! (Ctrl-C, SIGTERM, SIGHUP) takes the gate before it ends the process, so it waits for a write
//! in progress to end. What is guaranteed: on those signals the output ends at a row boundary,
//! unless its reader takes nothing more for [`GATE_WAIT`] (the handler then exits anyway and
//! says so). `kill -9` ends the process at once: no program can promise anything then.

use std::io::Write;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Held while rows are passed on to the output.
pub static WRITE_GATE: Mutex<()> = Mutex::new(());

/// How long the interrupt handler waits for a write in progress.
pub const GATE_WAIT: Duration = Duration::from_secs(5);

/// Bytes gathered before they are passed on.
const CHUNK: usize = 1 << 20;

/// The gate, locked (a panic elsewhere leaves it usable).
fn gate() -> MutexGuard<'static, ()> {
    WRITE_GATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Take the gate for the rest of the process, waiting at most [`GATE_WAIT`]; false when the
/// wait ran out (a write is stuck on a reader that takes nothing).
pub fn close_gate() -> bool {
    let start = std::time::Instant::now();
    loop {
        match WRITE_GATE.try_lock() {
            Ok(g) => {
                std::mem::forget(g);
                return true;
            }
            Err(std::sync::TryLockError::Poisoned(g)) => {
                std::mem::forget(g);
                return true;
            }
            Err(std::sync::TryLockError::WouldBlock) if start.elapsed() < GATE_WAIT => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(std::sync::TryLockError::WouldBlock) => return false,
        }
    }
}

/// A writer of whole rows: each row is added with [`RowWriter::row`] and reaches the inner
/// writer only together with the rows before it, never in part.
pub struct RowWriter<W: Write> {
    inner: W,
    buf: Vec<u8>,
    /// Bytes passed on whole so far.
    committed: u64,
    /// The file `inner` writes, cut back to the rows passed on whole when a write fails part-way
    /// (a full disk), so that what is kept of it ends with a whole row.
    file: Option<std::fs::File>,
}

impl<W: Write> RowWriter<W> {
    pub fn new(inner: W) -> Self {
        Self { inner, buf: Vec::with_capacity(CHUNK), committed: 0, file: None }
    }

    /// A writer into `file` (through `inner`), which a failed write cuts back to whole rows.
    pub fn for_file(inner: W, file: std::fs::File) -> Self {
        Self { file: Some(file), ..Self::new(inner) }
    }

    /// Add one row, written by `f` into the buffer whole.
    pub fn row(&mut self, f: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) -> std::io::Result<()> {
        let len = self.buf.len();
        if let Err(e) = f(&mut self.buf) {
            self.buf.truncate(len);
            return Err(e);
        }
        if self.buf.len() >= CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    /// Pass every row gathered on to the output, and flush it.
    pub fn flush(&mut self) -> std::io::Result<()> {
        let _held = gate();
        let r = if self.buf.is_empty() { Ok(()) } else { self.inner.write_all(&self.buf) }
            .and_then(|()| self.inner.flush());
        match r {
            Ok(()) => {
                self.committed += self.buf.len() as u64;
                self.buf.clear();
                Ok(())
            }
            Err(e) => {
                if let Some(f) = &self.file {
                    let _ = f.set_len(self.committed);
                }
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes at most 7 bytes a call, as a full pipe does.
    struct Trickle(Vec<Vec<u8>>);
    impl Write for Trickle {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let n = b.len().min(7);
            self.0.push(b[..n].to_vec());
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A file that takes 10 bytes, then fails as a full disk does: it is cut back to the rows
    /// passed on whole before.
    #[test]
    fn a_failed_write_leaves_whole_rows() {
        struct Full(std::fs::File, usize);
        impl Write for Full {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                if self.1 == 0 {
                    return Err(std::io::Error::other("no space"));
                }
                let n = b.len().min(self.1);
                self.1 -= n;
                self.0.write(&b[..n])
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let f = tempfile::tempfile().unwrap();
        let mut w = RowWriter::for_file(Full(f.try_clone().unwrap(), 10), f.try_clone().unwrap());
        w.row(|b| b.write_all(b"abcd\n")).unwrap();
        w.flush().unwrap();
        w.row(|b| b.write_all(b"efgh\nijkl\n")).unwrap();
        assert!(w.flush().is_err());
        assert_eq!(f.metadata().unwrap().len(), 5);
    }

    #[test]
    fn rows_reach_the_output_whole_and_in_order() {
        let mut w = RowWriter::new(Trickle(Vec::new()));
        for i in 0..1000u32 {
            w.row(|b| b.write_all(format!("row {i}\n").as_bytes())).unwrap();
        }
        // A row that fails to format leaves nothing behind.
        assert!(w.row(|b| b.write_all(b"half").and(Err(std::io::Error::other("no")))).is_err());
        assert!(w.buf.ends_with(b"row 999\n"));
        w.flush().unwrap();
        let all: Vec<u8> = w.inner.0.concat();
        let want: String = (0..1000).map(|i| format!("row {i}\n")).collect();
        assert_eq!(String::from_utf8(all).unwrap(), want);
        assert!(WRITE_GATE.try_lock().is_ok(), "the gate is free between writes");
    }
}

//! Writing files safely: atomic replacement of files and directories.

pub mod atomic;
pub mod digest;

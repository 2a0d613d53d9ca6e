//! xsent: multilingual sentence embeddings on candle.
//!
//! Text → tokenizer → [`model::Encoder`] → [`model::Pooling`] → embedding. The same encoder
//! serves inference (fused kernels) and training (differentiable ops, seeded dropout);
//! recipes add a loss, evaluators add a metric.

// First: its macros (errln!, outln!, out!) are used everywhere below.
#[macro_use]
pub mod log;
pub mod cli;
pub mod clock;
pub mod data;
pub mod device;
pub mod embed;
pub mod eval;
pub mod gpu;
pub mod index;
pub mod io;
pub mod model;
pub mod places;
pub mod plot;
pub mod profile;
pub mod shard;
pub mod threads;
pub mod train;
pub mod whole_rows;

pub use model::{Encoder, EncoderConfig, Pooling, SentenceEncoder};

/// The version written into reports and model directories.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

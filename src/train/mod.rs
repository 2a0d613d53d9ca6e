//! Training: the shared optimiser (more of the trainer arrives with the recipes).

pub mod optim;

pub use optim::{AdamW, AdamWConfig};

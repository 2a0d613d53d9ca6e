//! The recipes: each a loss over its training data and a validation ([`super::Recipe`]).
//! `wmd` is DuEAM's word mover's distance.

pub mod disentangle;
pub mod distill;
pub mod dueam;
pub mod lightweight;
pub mod sp;
pub mod wmd;

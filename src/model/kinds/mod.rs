//! Models that are not a plain transformer encoder: the averaging encoders of the `sp` recipe
//! (and their learned vocabularies) and the meaning/language heads of the `disentangle` recipe.

pub mod averaging;
pub mod disentangle;
pub mod vocab;

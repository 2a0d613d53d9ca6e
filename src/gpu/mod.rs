//! xsent's own CUDA kernels (built with `--features cuda`; [`launch`], their launch shapes, and
//! [`params`], their names and parameter lists, in every build): the in-place AdamW update, the
//! counter-based dropout, and the GPU side of the training ops whose CPU kernels are in
//! [`crate::model::kernels`] (LayerNorm, masked softmax, GELU, the linear layer, forward and
//! backward, and attention's head split and merge: one file each here). Their sources are the `.cu` files beside this one (`math.cuh`: the CPU's erf and exp,
//! warp sums); build.rs compiles them to PTX with nvcc, and the driver loads each module once per
//! device.

pub mod launch;
pub mod params;

#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
pub mod gelu;
#[cfg(feature = "cuda")]
pub mod heads;
#[cfg(feature = "cuda")]
pub mod layer_norm;
#[cfg(feature = "cuda")]
pub mod linear;
#[cfg(feature = "cuda")]
pub mod optim;
#[cfg(feature = "cuda")]
pub mod softmax;

#[cfg(feature = "cuda")]
pub use cuda::{adamw_update, dropout};
#[cfg(feature = "cuda")]
use cuda::{f32_view, rows_and_width, view, Elem, Loaded, ADAMW_MODULE, ADAMW_PTX};

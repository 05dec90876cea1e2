//! Transforms: stateless functions over a batch, run as tasks between their inputs and outputs.

pub mod filter;

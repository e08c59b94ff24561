//! Reel's compiler benchmarks: a generator of realistic flows and the measuring helpers the benchmark binaries share.

pub mod generate;
pub mod measure;

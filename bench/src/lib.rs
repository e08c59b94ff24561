//! Reel's benchmarks: a generator of realistic flows, the runtime's flow shapes and the measuring helpers the benchmark binaries share.

pub mod generate;
pub mod measure;
pub mod shapes;

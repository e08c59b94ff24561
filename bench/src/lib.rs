//! Reel's benchmarks: a generator of realistic flows, the runtime's flow shapes and the measuring helpers the benchmark binaries share.

// The benchmarks measure in process what the `reel` binary does, so they allocate as it does:
// linking `reel_alloc` makes its allocator theirs; the binaries call `reel_alloc::tune` first.
pub use reel_alloc;

pub mod generate;
pub mod measure;
pub mod shapes;

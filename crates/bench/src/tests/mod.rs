//! Tests of the benchmarks' own machinery (the llama.cpp peer's GGUF writer and probe) that name
//! the crate's internals: they live inside the crate so that what they reach need not be public.

mod bench_llama;
#[allow(dead_code)]
#[path = "../../../../tests/common/temp.rs"]
mod temp;

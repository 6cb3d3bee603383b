//! `pointact bench cloud`: placeholder until the geometry module lands.

/// Options of `pointact bench cloud`.
pub struct CloudBenchArgs {
    pub iters: usize,
    pub python: String,
}

pub fn run(_args: &CloudBenchArgs) -> Result<String, std::io::Error> {
    Err(std::io::Error::other("not built yet: bench cloud"))
}

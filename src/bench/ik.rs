//! `pointact bench ik`: placeholder until the kinematics module lands.

/// Options of `pointact bench ik`.
pub struct IkBenchArgs {
    pub robot: String,
    pub n: usize,
    pub seed: u64,
    pub python_peer: bool,
}

pub fn run(_args: &IkBenchArgs) -> Result<String, std::io::Error> {
    Err(std::io::Error::other("not built yet: bench ik"))
}

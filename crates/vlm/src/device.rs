//! Where the model runs: `--device cpu|cuda|cuda:N`.
//!
//! A [`DeviceSpec`] is what the user asked for; [`DeviceSpec::open`] turns it into a candle
//! [`Device`], with errors that say what to do: a build without the `cuda` feature names the
//! build command, a CUDA device that cannot be opened names the driver. Quantized weights
//! ([`Quant::Q8_0`], [`Quant::Q4K`]) are our own CPU kernels ([`super::linear`]), so
//! [`DeviceSpec::check`] refuses them on any other device before anything is loaded.

use std::fmt;
use std::str::FromStr;

use candle_core::Device;

use super::Quant;

/// A device named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// The host CPU (the default); the only device the quantized kernels run on.
    #[default]
    Cpu,
    /// A CUDA GPU by ordinal (`cuda` = `cuda:0`).
    Cuda(usize),
}

/// Why a device cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The `--device` text is none of `cpu`, `cuda`, `cuda:N`; holds the text as given.
    #[error("unknown device `{0}`: cpu, cuda or cuda:N (N = the GPU's ordinal, 0 first)")]
    Unknown(String),
    /// A CUDA device was asked for, but this build lacks the `cuda` feature.
    #[error(
        "--device {0}: this pointact was built without the cuda feature: \
         cargo build --release --features cuda (docs/install.md, CUDA)"
    )]
    NotBuilt(DeviceSpec),
    /// `reason`: candle's error as text, without the backtrace it carries under
    /// `RUST_BACKTRACE` (the message is for a user, who can fix nothing in candle's frames).
    #[error(
        "--device {spec}: cannot open the GPU ({reason}); is the NVIDIA driver installed \
         and the GPU visible (nvidia-smi)? --device cpu runs without one"
    )]
    Open {
        /// The device that failed to open.
        spec: DeviceSpec,
        /// candle's error message.
        reason: String,
    },
    /// Quantized weights were asked for on a device other than the CPU (see [`DeviceSpec::check`]).
    #[error(
        "--{flag} {quant} runs on the CPU only (our quantized kernels): with --device {spec} \
         use --{flag} f32, or --device cpu to keep {quant}"
    )]
    QuantNotOnDevice {
        /// The command-line flag that asked for them, without dashes (`quant` or `vision-quant`).
        flag: &'static str,
        /// The quantized format asked for.
        quant: Quant,
        /// The device that cannot run it.
        spec: DeviceSpec,
    },
}

impl DeviceSpec {
    /// Whether this is the CPU.
    pub fn is_cpu(self) -> bool {
        self == DeviceSpec::Cpu
    }

    /// The candle device. Opening a CUDA device creates its context and loads nothing else;
    /// each kernel module is loaded on first use.
    pub fn open(self) -> Result<Device, DeviceError> {
        match self {
            DeviceSpec::Cpu => Ok(Device::Cpu),
            DeviceSpec::Cuda(_) if !cfg!(feature = "cuda") => Err(DeviceError::NotBuilt(self)),
            DeviceSpec::Cuda(n) => Device::new_cuda(n).map_err(|e| {
                let e = match e {
                    candle_core::Error::WithBacktrace { inner, .. } => *inner,
                    e => e,
                };
                DeviceError::Open {
                    spec: self,
                    reason: e.to_string(),
                }
            }),
        }
    }

    /// What can be refused without touching a GPU, so a command fails before it downloads or
    /// loads anything: a CUDA device in a build without the feature, and quantized weights
    /// anywhere but the CPU (`quant` is the text decoder's `--quant`, `vision_quant` the vision
    /// tower's `--vision-quant`).
    pub fn check(self, quant: Quant, vision_quant: Quant) -> Result<(), DeviceError> {
        if self.is_cpu() {
            return Ok(());
        }
        if !cfg!(feature = "cuda") {
            return Err(DeviceError::NotBuilt(self));
        }
        for (flag, q) in [("quant", quant), ("vision-quant", vision_quant)] {
            if q != Quant::F32 {
                return Err(DeviceError::QuantNotOnDevice {
                    flag,
                    quant: q,
                    spec: self,
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = DeviceError;

    /// `cpu`, `cuda` or `cuda:N`, any case. Parsed the same with or without the `cuda` feature,
    /// so a command line means the same in every build; [`Self::open`] says what is missing.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        match lower.as_str() {
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
            _ => lower
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DeviceSpec::Cuda)
                .ok_or_else(|| DeviceError::Unknown(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_cuda_and_ordinals() {
        assert_eq!("cpu".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu);
        assert_eq!("CUDA".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(0));
        assert_eq!("cuda:3".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(3));
        for bad in ["", "cuda:", "cuda:-1", "cuda:x", "metal", "cuda1"] {
            let e = bad.parse::<DeviceSpec>().unwrap_err().to_string();
            assert!(e.contains("cpu, cuda or cuda:N"), "{bad}: {e}");
        }
        assert_eq!(DeviceSpec::Cuda(2).to_string(), "cuda:2");
        assert_eq!(DeviceSpec::default().to_string(), "cpu");
    }

    #[test]
    fn the_cpu_opens_and_takes_every_format() {
        assert!(DeviceSpec::Cpu.open().unwrap().is_cpu());
        DeviceSpec::Cpu.check(Quant::Q4K, Quant::Q8_0).unwrap();
    }

    #[test]
    fn the_quantized_refusal_names_the_flag_and_the_way_out() {
        let e = DeviceError::QuantNotOnDevice {
            flag: "quant",
            quant: Quant::Q4K,
            spec: DeviceSpec::Cuda(1),
        }
        .to_string();
        assert!(
            e.contains("--quant q4k runs on the CPU only")
                && e.contains("with --device cuda:1 use --quant f32"),
            "{e}"
        );
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn quantized_weights_are_refused_on_a_gpu_with_the_flag_to_change() {
        let gpu = DeviceSpec::Cuda(0);
        gpu.check(Quant::F32, Quant::F32).unwrap();
        let e = gpu.check(Quant::Q4K, Quant::F32).unwrap_err().to_string();
        assert!(
            e.contains("--quant q4k") && e.contains("--quant f32"),
            "{e}"
        );
        let e = gpu.check(Quant::F32, Quant::Q8_0).unwrap_err().to_string();
        assert!(
            e.contains("--vision-quant q8_0") && e.contains("--vision-quant f32"),
            "{e}"
        );
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn without_the_feature_cuda_names_the_build_command() {
        for e in [
            DeviceSpec::Cuda(0)
                .check(Quant::F32, Quant::F32)
                .unwrap_err(),
            DeviceSpec::Cuda(1).open().unwrap_err(),
        ] {
            let e = e.to_string();
            assert!(
                e.contains("built without the cuda feature")
                    && e.contains("cargo build --release --features cuda"),
                "{e}"
            );
        }
    }
}

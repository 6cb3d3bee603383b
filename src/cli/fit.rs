//! `pointact fit spheres`: the planner's sphere model of a robot, fitted to its URDF and printed in
//! the form `robot-configs/<robot>/spheres.toml` stores.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use pointact::kinematics::RobotModel;
use pointact::planning::SphereModel;

#[derive(Subcommand)]
pub enum FitCommand {
    /// Fit collision spheres per link (and find the self-collision pairs to skip) and print them
    /// as spheres.toml.
    Spheres(SpheresCli),
}

#[derive(Args)]
pub struct SpheresCli {
    /// Built-in robot (xarm6, widowx250) or a robot folder (robot.toml + URDF).
    #[arg(long, default_value = "xarm6")]
    pub robot: String,
    /// Write here instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(which: FitCommand) -> Result<ExitCode> {
    match which {
        FitCommand::Spheres(a) => {
            let model = RobotModel::resolve(&a.robot)?;
            let fitted = SphereModel::fit(&model)?;
            let urdf = std::path::Path::new(&model.config.urdf)
                .file_name()
                .and_then(|f| f.to_str())
                .unwrap_or("robot.urdf")
                .to_string();
            let text = fitted.to_toml(&urdf);
            let count: usize = fitted.links.iter().map(|l| l.spheres.len()).sum();
            match a.out {
                Some(path) => {
                    std::fs::write(&path, text)
                        .with_context(|| format!("writing {}", path.display()))?;
                    eprintln!(
                        "spheres   {count} on {} links, {} pairs not checked -> {}",
                        fitted.links.len(),
                        fitted.allowed.len(),
                        path.display()
                    );
                }
                None => print!("{text}"),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

use crate::train::builtin;
use anyhow::{bail, Result};

#[derive(clap::Subcommand)]
pub enum Command {
    /// List the built-in training configs (configs/*.toml, compiled into xsent).
    List,
    /// Print a built-in config as it is written, to copy and edit:
    /// `xsent config show dueam > my.toml`, then `xsent train --config my.toml`.
    Show {
        /// Its name, e.g. dueam (`xsent config list`).
        name: String,
    },
}

pub fn run(c: Command) -> Result<()> {
    match c {
        Command::List => {
            let width = builtin::CONFIGS.iter().map(|c| c.name.len()).max().unwrap_or(0);
            for c in builtin::CONFIGS {
                outln!("{:width$}  {}", c.name, c.about);
            }
            errln!("xsent config: train one with `xsent train --config NAME`; print it with `xsent config show NAME`");
            Ok(())
        }
        Command::Show { name } => match builtin::find(&name) {
            Some(c) => {
                out!("{}", c.text);
                Ok(())
            }
            None => bail!("there is no built-in config {name:?}; the built-in ones are {}", builtin::names()),
        },
    }
}

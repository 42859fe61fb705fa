//! `toolmesh completions SHELL`: the completion script clap_complete makes from the command line's own definition.

use crate::Failure;
use crate::args::Cli;
use clap::CommandFactory;
use clap_complete::Shell;
use std::io::Write;

/// The completion script of `toolmesh` for `shell`.
fn script(shell: Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "toolmesh", &mut out);
    out
}

/// Prints the completion script for `shell` (built whole first, so a
/// closed pipe is an error, not a panic inside the generator).
pub(crate) fn print(shell: Shell) -> Result<(), Failure> {
    std::io::stdout()
        .lock()
        .write_all(&script(shell))
        .map_err(|e| Failure::Failed(format!("cannot write the completion script: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bash script completes every subcommand and the global flags.
    #[test]
    fn bash_script_names_the_subcommands() {
        let text = String::from_utf8(script(Shell::Bash)).unwrap();
        for word in [
            "toolmesh",
            "up",
            "serve",
            "tools",
            "call",
            "health",
            "snapshot",
            "explain",
            "approvals",
            "disable",
            "enable",
            "mcp",
            "completions",
            "--server",
            "--json",
            "--timeout-ms",
        ] {
            assert!(text.contains(word), "{word} missing from the bash script");
        }
    }

    /// zsh and fish get scripts naming the subcommands too.
    #[test]
    fn zsh_and_fish_scripts_are_made() {
        for shell in [Shell::Zsh, Shell::Fish] {
            let text = String::from_utf8(script(shell)).unwrap();
            assert!(
                text.contains("tools") && text.contains("health"),
                "{shell}: {text}"
            );
        }
    }
}

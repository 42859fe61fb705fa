//! The fenced code blocks of README.md (and deploy/README.md), read from the file itself, for the tests that run its snippets as printed.

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// A fenced code block of the README, with the heading it sits under.
#[derive(Debug)]
pub struct Block {
    /// The `##` heading it sits under.
    pub heading: String,
    /// Its info string (`sh`, `rust`, …).
    pub lang: String,
    /// Its lines, without the fences.
    pub text: String,
}

/// Every fenced block of README.md, in order.
pub fn blocks() -> Vec<Block> {
    blocks_in("README.md")
}

/// Every fenced block of the Markdown file `file` (relative to the root),
/// in order.
pub fn blocks_in(file: &str) -> Vec<Block> {
    let readme = std::fs::read_to_string(crate::repo_root().join(file))
        .unwrap_or_else(|e| panic!("read {file}: {e}"));
    let mut blocks = Vec::new();
    let mut heading = String::new();
    let mut open: Option<Block> = None;
    for line in readme.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(lang)) => {
                open = Some(Block {
                    heading: heading.clone(),
                    lang: lang.trim().to_owned(),
                    text: String::new(),
                })
            }
            (Some(_), Some(_)) => blocks.extend(open.take()),
            (Some(block), None) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            (None, None) => {
                if let Some(title) = line.strip_prefix('#').map(|t| t.trim_start_matches('#')) {
                    heading = title.trim().to_owned();
                }
            }
        }
    }
    assert!(open.is_none(), "{file} ends inside a code block");
    blocks
}

/// The blocks in `lang` under the heading `heading`, at least one.
pub fn blocks_under(heading: &str, lang: &str) -> Vec<Block> {
    blocks_under_in("README.md", heading, lang)
}

/// The blocks of `file` in `lang` under the heading `heading`, at least one.
pub fn blocks_under_in(file: &str, heading: &str, lang: &str) -> Vec<Block> {
    let found: Vec<Block> = blocks_in(file)
        .into_iter()
        .filter(|b| b.heading == heading && b.lang == lang)
        .collect();
    assert!(
        !found.is_empty(),
        "{file} has no {lang} block under \"{heading}\""
    );
    found
}

/// A directory holding a `toolmesh` that is this build's binary, for PATH:
/// the snippets call `toolmesh` by name.
pub fn toolmesh_on_path(dir: &Path) -> std::ffi::OsString {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let link = bin.join("toolmesh");
    if !link.exists() {
        std::os::unix::fs::symlink(crate::toolmesh_bin(), &link).unwrap();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(&path))).unwrap()
}

/// Bytes a process wrote, as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `line` run by `sh -c` in `dir` with `path` as PATH and `env` (without
/// the client environment), to the end.
pub fn shell(line: &str, dir: &Path, path: &std::ffi::OsStr, env: &[(&str, &str)]) -> Output {
    let mut command = Command::new("sh");
    command
        .args(["-c", line])
        .current_dir(dir)
        .env("PATH", path)
        .stdin(Stdio::null());
    for var in crate::CLIENT_ENV {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    command.output().expect("run sh")
}

/// The executor token a README bridge block's `$TOKEN` stands for, known
/// to [`bridge_block_policy`].
pub const README_EXECUTOR_TOKEN: &str = "readme-executor";

/// A mesh policy for a README bridge block: anonymous agents of tenant dev
/// may use every tool, and [`README_EXECUTOR_TOKEN`] is an executor.
pub fn bridge_block_policy() -> String {
    crate::PolicyBuilder::new()
        .anonymous("anonymous", "dev", &["agent"])
        .caller(
            crate::Caller::token(README_EXECUTOR_TOKEN, "readme-bridge")
                .tenant("dev")
                .roles(&["executor"]),
        )
        .grant("everything", &[], &["*"])
        .build_toml()
}

/// The README's block under `heading` — a `toolmesh bridge …` line, then
/// a call — run as printed in `dir` beside the mesh at `mesh` (whose policy
/// is [`bridge_block_policy`]): the bridge line, with the README's
/// `127.0.0.1:7070` and each of `targets` replaced by this run's
/// addresses, started by `sh`; then the call, by `sh`, until it succeeds
/// within `ready`. Answers what the call printed.
pub async fn bridge_block_runs(
    heading: &str,
    dir: &Path,
    mesh: &str,
    targets: &[(&str, &str)],
    ready: std::time::Duration,
) -> String {
    use crate::TestProc;
    let blocks = blocks_under(heading, "sh");
    assert_eq!(blocks.len(), 1, "one block under {heading:?}");
    let lines: Vec<&str> = blocks[0]
        .text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let path = toolmesh_on_path(dir);
    let env = [("TOOLMESH_SERVER", mesh), ("TOKEN", README_EXECUTOR_TOKEN)];
    let mut bridge_line = lines[0].replace("127.0.0.1:7070", mesh);
    for (printed, real) in targets {
        bridge_line = bridge_line.replace(printed, real);
    }
    let mut command = Command::new("sh");
    command
        .args(["-c", &format!("exec {bridge_line}")])
        .current_dir(dir)
        .env("PATH", &path)
        .envs(env.iter().copied());
    for var in crate::CLIENT_ENV {
        command.env_remove(var);
    }
    let bridge = crate::Proc::spawn(&format!("readme {heading}"), command);
    bridge.listen_addr();
    let called = crate::eventually("the README's call answers", ready, || {
        let output = shell(lines[1], dir, &path, &env);
        std::future::ready(output.status.success().then_some(output))
    })
    .await;
    text(&called.stdout)
}

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

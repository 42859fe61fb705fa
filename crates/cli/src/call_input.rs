//! The JSON arguments of `toolmesh call`: inline, `@FILE` or `-` (stdin), checked before sending.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Why the arguments of `toolmesh call` cannot be sent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ArgumentsError {
    /// `@` with nothing after it.
    #[error(
        "`@` must be followed by a file name, as in `toolmesh call NAME @args.json` (`-` reads stdin)"
    )]
    NoFileName,
    /// The file named after `@` cannot be read.
    #[error(
        "cannot read the arguments file {}: {source}; after `@` give the path of a JSON file (relative to the current directory)",
        path.display()
    )]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// Stdin cannot be read.
    #[error("cannot read the arguments from stdin: {0}")]
    ReadStdin(std::io::Error),
    /// Nothing but white space.
    #[error("{origin} are empty; give a JSON object, such as {{}}")]
    Empty {
        /// Where they came from.
        origin: String,
    },
    /// Not JSON.
    #[error(
        "{origin} are not valid JSON: {problem} at line {line}, column {column}; fix that spot and call again"
    )]
    NotJson {
        /// Where they came from.
        origin: String,
        /// What the parser expected or found.
        problem: String,
        /// 1-based line of the problem.
        line: usize,
        /// 1-based column of the problem.
        column: usize,
    },
}

/// Where the arguments come from.
#[derive(Debug, PartialEq, Eq)]
enum Source<'a> {
    /// On the command line.
    Inline(&'a str),
    /// `@FILE`.
    File(&'a Path),
    /// `-`.
    Stdin,
}

impl<'a> Source<'a> {
    fn of(text: &'a str) -> Result<Self, ArgumentsError> {
        match (text, text.strip_prefix('@')) {
            ("-", _) => Ok(Source::Stdin),
            (_, Some("")) => Err(ArgumentsError::NoFileName),
            (_, Some(path)) => Ok(Source::File(Path::new(path))),
            (_, None) => Ok(Source::Inline(text)),
        }
    }
}

impl fmt::Display for Source<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Inline(_) => write!(f, "the arguments"),
            Source::File(path) => write!(f, "the arguments in {}", path.display()),
            Source::Stdin => write!(f, "the arguments read from stdin"),
        }
    }
}

/// Whether `text` (the command line's arguments) asks to read stdin.
pub(crate) fn reads_stdin(text: &str) -> bool {
    text == "-"
}

/// The arguments `text` stands for (itself, the contents of `@FILE`, or
/// `stdin` for `-`), checked to be JSON.
pub(crate) fn read(text: &str, stdin: impl Read) -> Result<String, ArgumentsError> {
    let source = Source::of(text)?;
    let json = match &source {
        Source::Inline(json) => (*json).to_owned(),
        Source::File(path) => {
            std::fs::read_to_string(path).map_err(|source| ArgumentsError::ReadFile {
                path: path.to_path_buf(),
                source,
            })?
        }
        Source::Stdin => read_all(stdin).map_err(ArgumentsError::ReadStdin)?,
    };
    check(&json, &source)?;
    Ok(json)
}

fn read_all(mut input: impl Read) -> std::io::Result<String> {
    let mut text = String::new();
    input.read_to_string(&mut text)?;
    Ok(text)
}

/// Fails unless `json` is one JSON value, saying where it is not.
fn check(json: &str, source: &Source<'_>) -> Result<(), ArgumentsError> {
    if json.trim().is_empty() {
        return Err(ArgumentsError::Empty {
            origin: source.to_string(),
        });
    }
    let Err(error) = serde_json::from_str::<serde::de::IgnoredAny>(json) else {
        return Ok(());
    };
    // serde_json ends its message with " at line L column C".
    let text = error.to_string();
    let at = format!(" at line {} column {}", error.line(), error.column());
    Err(ArgumentsError::NotJson {
        origin: source.to_string(),
        problem: text.strip_suffix(&at).unwrap_or(&text).to_owned(),
        line: error.line(),
        column: error.column(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_stdin() -> &'static [u8] {
        b""
    }

    #[test]
    fn inline_arguments_pass_through() {
        let json = r#"{"query": "reset password"}"#;
        assert_eq!(read(json, no_stdin()).unwrap(), json);
    }

    #[test]
    fn at_file_reads_the_file() {
        let dir = toolmesh_procs::TempDir::new("cli-args").unwrap();
        let path = dir.join("args.json");
        std::fs::write(&path, "{\n  \"query\": \"reset password\"\n}\n").unwrap();
        let json = read(&format!("@{}", path.display()), no_stdin()).unwrap();
        assert!(json.contains("reset password"), "{json}");
    }

    #[test]
    fn dash_reads_stdin() {
        let json = read("-", &br#"{"user_id": "u_9"}"#[..]).unwrap();
        assert_eq!(json, r#"{"user_id": "u_9"}"#);
        assert!(reads_stdin("-") && !reads_stdin("{}"));
    }

    #[test]
    fn a_missing_file_is_named() {
        let text = read("@/nonexistent/args.json", no_stdin())
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("/nonexistent/args.json") && text.contains("No such file"),
            "{text}"
        );
        let text = read("@", no_stdin()).unwrap_err().to_string();
        assert!(text.contains("file name"), "{text}");
    }

    #[test]
    fn bad_json_says_line_and_column() {
        let dir = toolmesh_procs::TempDir::new("cli-args").unwrap();
        let path = dir.join("bad.json");
        std::fs::write(&path, "{\n  \"query\": \"a\"\n  \"limit\": 3\n}\n").unwrap();
        let error = read(&format!("@{}", path.display()), no_stdin()).unwrap_err();
        let ArgumentsError::NotJson { line, column, .. } = &error else {
            panic!("{error}");
        };
        assert_eq!((*line, *column), (3, 3));
        let text = error.to_string();
        assert!(
            text.contains("bad.json") && text.contains("line 3, column 3"),
            "{text}"
        );
        let text = read("-", &b"{\"a\": }"[..]).unwrap_err().to_string();
        assert!(
            text.contains("stdin") && text.contains("line 1, column 7"),
            "{text}"
        );
    }

    #[test]
    fn empty_arguments_are_refused() {
        let text = read("-", &b"  \n"[..]).unwrap_err().to_string();
        assert!(text.contains("empty") && text.contains("stdin"), "{text}");
    }
}

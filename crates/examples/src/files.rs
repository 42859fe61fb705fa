//! Executor `files`: `read_file`, `list_files`, `write_file` and `edit_file`, confined to one root directory.
//!
//! Every path a model passes is relative to the root. It is normalised
//! lexically first (`.` dropped, `..` climbs one level and may not climb
//! above the root; absolute paths are refused), then walked one component at
//! a time from the canonical root: an existing component that is a symbolic
//! link is followed only if its canonical target is still inside the root,
//! and the walk stops at the first component that does not exist yet (a new
//! file or directory). The tools then work on the canonical path found, so
//! no read or write ever goes through a link that leads out of the root.
//!
//! The checks and the I/O are separate system calls: a process that can
//! swap directories for symbolic links inside the root while a call runs
//! could race them. The example defends against a model, not against a
//! hostile local user.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::{
    ffi::OsStr,
    fs, io,
    io::Read,
    path::{Component, Path, PathBuf},
    sync::{Arc, OnceLock},
    time::Duration,
};
use toolmesh_executor::{CallCx, Executor, RiskLevel, Tool, ToolFailure, ToolInfo, ToolOutput};

/// Largest file `read_file` returns and `write_file`/`edit_file` write: 1 MiB.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Most entries `list_files` returns for one directory.
pub const MAX_LIST_ENTRIES: usize = 1000;

/// The files the default root starts with: (relative path, content).
pub const FIXTURES: [(&str, &str); 3] = [
    (
        "README.md",
        "# Scratch space\n\nThis directory is the root of the toolmesh `files` example.\n\
         Every path the tools take is relative to it.\n",
    ),
    (
        "notes/todo.txt",
        "- water the plants\n- renew the TLS certificate\n- reply to Grace about the printer\n",
    ),
    (
        "notes/meeting.md",
        "# Weekly sync\n\nAttendees: Ada, Grace\n\nAction items:\n- Ada: draft the migration plan\n",
    ),
];

/// The `files` executor, confined to `root` (created if missing), or, with
/// `None`, to [`default_root`] seeded with [`FIXTURES`].
///
/// Nothing touches the disk until the first call: the root is prepared and
/// canonicalised then, once. If that fails, every call answers with a
/// TOOL_ERROR naming the problem.
pub fn executor(root: Option<PathBuf>) -> Executor {
    let root = Arc::new(Root {
        configured: root,
        ready: OnceLock::new(),
    });
    Executor::new("files")
        .tool(ReadFile(Arc::clone(&root)))
        .tool(ListFiles(Arc::clone(&root)))
        .tool(WriteFile(Arc::clone(&root)))
        .tool(EditFile(root))
}

/// The directory used when no root is configured:
/// `{temp dir}/toolmesh-files-{pid}`.
pub fn default_root() -> PathBuf {
    std::env::temp_dir().join(format!("toolmesh-files-{}", std::process::id()))
}

/// The root directory, canonicalised on first use.
struct Root {
    configured: Option<PathBuf>,
    ready: OnceLock<Result<PathBuf, RootError>>,
}

/// Why the files root cannot be used (every file tool then fails saying so).
#[derive(Debug, Clone, thiserror::Error)]
enum RootError {
    /// The configured directory cannot be created or read.
    #[error("the files root {} is not usable: {source}", dir.display())]
    Unusable {
        /// The directory.
        dir: PathBuf,
        /// What the OS said.
        source: Arc<io::Error>,
    },
    /// The default directory cannot be made afresh.
    #[error("cannot prepare the files root {}: {source}", dir.display())]
    Unprepared {
        /// The directory.
        dir: PathBuf,
        /// What the OS said.
        source: Arc<io::Error>,
    },
}

impl Root {
    /// The canonical root, or why there is none.
    fn get(&self) -> Result<&Path, ToolFailure> {
        let ready = self.ready.get_or_init(|| {
            let prepared = match &self.configured {
                Some(dir) => prepare(dir).map_err(|e| RootError::Unusable {
                    dir: dir.clone(),
                    source: Arc::new(e),
                }),
                // One fresh default root per process, shared by every
                // executor in it.
                None => {
                    static DEFAULT: OnceLock<Result<PathBuf, RootError>> = OnceLock::new();
                    DEFAULT
                        .get_or_init(|| {
                            let dir = default_root();
                            seed_default(&dir).map_err(|e| RootError::Unprepared {
                                dir: dir.clone(),
                                source: Arc::new(e),
                            })
                        })
                        .clone()
                }
            };
            match &prepared {
                Ok(root) => tracing::info!(root = %root.display(), "files root ready"),
                Err(e) => tracing::error!("{e}"),
            }
            prepared
        });
        match ready {
            Ok(root) => Ok(root),
            Err(e) => Err(ToolFailure::new(format!(
                "{e}; the executor is misconfigured, so no file tool works until it is fixed"
            ))),
        }
    }
}

/// Creates `dir` if needed and canonicalises it.
fn prepare(dir: &Path) -> io::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let root = fs::canonicalize(dir)?;
    if !root.is_dir() {
        return Err(io::Error::other("it is not a directory"));
    }
    Ok(root)
}

/// Makes `dir` a fresh directory (removing whatever a stale run left there,
/// without following a symbolic link) holding the fixtures.
fn seed_default(dir: &Path) -> io::Result<PathBuf> {
    match fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(dir)?,
        Ok(_) => fs::remove_file(dir)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut builder = fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    // Not recursive: fails if someone recreated the name in the meantime.
    builder.create(dir)?;
    let root = fs::canonicalize(dir)?;
    for (path, content) in FIXTURES {
        let path = root.join(path);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(path, content)?;
    }
    Ok(root)
}

/// A path resolved inside the root.
#[derive(Debug)]
struct Resolved {
    /// The normalised relative path, `/`-separated, as shown to the model.
    shown: String,
    /// Where to do the I/O: canonical when `exists`, else the canonical
    /// nearest existing ancestor joined with the components still missing.
    path: PathBuf,
    /// Whether the path exists.
    exists: bool,
}

/// Resolves `raw` against `root` (canonical), refusing anything that would
/// leave it.
fn resolve(root: &Path, raw: &str) -> Result<Resolved, ToolFailure> {
    let outside = || {
        ToolFailure::new(format!(
            "path {raw:?} is outside the files root; paths must stay inside the root: pass a \
             path relative to it, such as \"notes/todo.txt\" (no leading \"/\", and \"..\" may \
             not climb above the root)"
        ))
    };
    let mut parts: Vec<&OsStr> = Vec::new();
    for component in Path::new(raw).components() {
        match component {
            Component::Prefix(_) | Component::RootDir => return Err(outside()),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(outside());
                }
            }
            Component::Normal(part) => parts.push(part),
        }
    }
    let shown = |parts: &[&OsStr]| -> String {
        if parts.is_empty() {
            ".".to_owned()
        } else {
            parts
                .iter()
                .map(|p| p.to_string_lossy())
                .collect::<Vec<_>>()
                .join("/")
        }
    };

    // Invariant: `current` is canonical and inside the root.
    let mut current = root.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        let next = current.join(part);
        let so_far = shown(&parts[..=i]);
        match fs::symlink_metadata(&next) {
            Ok(meta) => {
                current = if meta.file_type().is_symlink() {
                    match fs::canonicalize(&next) {
                        Ok(target) if target.starts_with(root) => target,
                        Ok(_) => {
                            return Err(ToolFailure::new(format!(
                                "{so_far} is a symbolic link that leads outside the files root; \
                                 paths must stay inside the root, so it cannot be used"
                            )));
                        }
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {
                            return Err(ToolFailure::new(format!(
                                "{so_far} is a symbolic link to something that does not exist; \
                                 it cannot be used (paths must stay inside the root)"
                            )));
                        }
                        Err(e) => return Err(io_failure(&so_far, &e)),
                    }
                } else {
                    next
                };
                if i + 1 < parts.len() && !current.is_dir() {
                    return Err(ToolFailure::new(format!(
                        "{so_far} is a file, not a directory, so {} cannot exist",
                        shown(&parts)
                    )));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Nothing from here on exists: `current` is the nearest
                // existing ancestor, canonical and checked.
                let mut path = current;
                path.extend(&parts[i..]);
                return Ok(Resolved {
                    shown: shown(&parts),
                    path,
                    exists: false,
                });
            }
            Err(e) => return Err(io_failure(&so_far, &e)),
        }
    }
    // Belt and braces: the walk kept `current` canonical; check once more.
    let canonical = fs::canonicalize(&current).map_err(|e| io_failure(&shown(&parts), &e))?;
    if !canonical.starts_with(root) {
        return Err(outside());
    }
    Ok(Resolved {
        shown: shown(&parts),
        path: canonical,
        exists: true,
    })
}

/// An I/O error on `shown`, in words a model can act on.
fn io_failure(shown: &str, error: &io::Error) -> ToolFailure {
    match error.kind() {
        io::ErrorKind::NotFound => ToolFailure::new(format!(
            "{shown} does not exist; call list_files to see what is there"
        )),
        io::ErrorKind::PermissionDenied => {
            ToolFailure::new(format!("permission denied for {shown}"))
        }
        _ => ToolFailure::new(format!("cannot access {shown}: {error}")),
    }
}

/// Runs blocking file work off the async threads; a panic in it is re-raised
/// so the SDK reports it like any other panicking tool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolFailure> + Send + 'static,
) -> Result<T, ToolFailure> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => {
            Err(ToolFailure::new(format!("the file operation was cancelled: {e}")).retryable())
        }
    }
}

/// The text of the regular file at `resolved`, refusing directories,
/// special files, files over [`MAX_FILE_BYTES`] and anything not UTF-8 text.
fn read_text(resolved: &Resolved) -> Result<String, ToolFailure> {
    let shown = &resolved.shown;
    if !resolved.exists {
        return Err(ToolFailure::new(format!(
            "{shown} does not exist; call list_files to see what is there"
        )));
    }
    let meta = fs::metadata(&resolved.path).map_err(|e| io_failure(shown, &e))?;
    if meta.is_dir() {
        return Err(ToolFailure::new(format!(
            "{shown} is a directory; use list_files to see what it holds"
        )));
    }
    if !meta.is_file() {
        return Err(ToolFailure::new(format!(
            "{shown} is not a regular file (a device, socket or pipe); only text files can be read"
        )));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(too_large(shown, meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    fs::File::open(&resolved.path)
        .and_then(|file| file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| io_failure(shown, &e))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        // It grew since the size check.
        return Err(too_large(shown, bytes.len() as u64));
    }
    if bytes.contains(&0) {
        return Err(not_text(shown));
    }
    String::from_utf8(bytes).map_err(|_| not_text(shown))
}

fn too_large(shown: &str, bytes: u64) -> ToolFailure {
    ToolFailure::new(format!(
        "{shown} is {bytes} bytes, over the 1 MiB ({MAX_FILE_BYTES} bytes) limit of the file \
         tools; it cannot be read or edited with them"
    ))
}

fn not_text(shown: &str) -> ToolFailure {
    ToolFailure::new(format!(
        "{shown} is not UTF-8 text (it looks like a binary file); the file tools only handle text"
    ))
}

/// Writes `content` to `resolved`, creating missing parent directories;
/// `true` when the file was new.
fn write_text(resolved: &Resolved, content: &str) -> Result<bool, ToolFailure> {
    let shown = &resolved.shown;
    if content.len() as u64 > MAX_FILE_BYTES {
        return Err(ToolFailure::new(format!(
            "content is {} bytes, over the 1 MiB ({MAX_FILE_BYTES} bytes) limit; write a \
             smaller file or split it into several",
            content.len()
        )));
    }
    if resolved.exists {
        let meta = fs::metadata(&resolved.path).map_err(|e| io_failure(shown, &e))?;
        if meta.is_dir() {
            return Err(ToolFailure::new(format!(
                "{shown} is a directory; pass the path of a file inside it, such as {}/new.txt",
                shown.trim_end_matches('/')
            )));
        }
        if !meta.is_file() {
            return Err(ToolFailure::new(format!(
                "{shown} is not a regular file (a device, socket or pipe); it cannot be written"
            )));
        }
    } else if let Some(parent) = resolved.path.parent() {
        // Everything missing lies below a checked, canonical ancestor.
        fs::create_dir_all(parent).map_err(|e| io_failure(shown, &e))?;
    }
    fs::write(&resolved.path, content).map_err(|e| io_failure(shown, &e))?;
    Ok(!resolved.exists)
}

/// How many times `needle` (non-empty) occurs in `haystack`, overlapping
/// occurrences included, and the byte offset of the first.
fn occurrences(haystack: &str, needle: &str) -> (usize, Option<usize>) {
    let mut count = 0;
    let mut first = None;
    let mut from = 0;
    while let Some(at) = haystack[from..].find(needle) {
        let at = from + at;
        count += 1;
        first.get_or_insert(at);
        // Step one character, so "aa" counts twice in "aaa".
        from = at + haystack[at..].chars().next().map_or(1, char::len_utf8);
    }
    (count, first)
}

// ---------------------------------------------------------------------------

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadFileArgs {
    /// The file to read, relative to the files root, e.g. "notes/todo.txt".
    #[schemars(length(min = 1, max = 4096))]
    path: String,
}

/// `read_file`.
struct ReadFile(Arc<Root>);

impl Tool for ReadFile {
    type Args = ReadFileArgs;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(
            "read_file",
            "1.0.0",
            "Read a text file under the files root and return its whole content, exactly as \
             stored. Paths are relative to the files root (\"notes/todo.txt\"); absolute \
             paths and paths that leave the root are refused. Only UTF-8 text files up to 1 MiB \
             can be read; binary files are refused. Call list_files first if you do not know \
             the exact path. Read a file before you edit it with edit_file. Read-only.",
        )
        .risk(RiskLevel::Low)
        .read_only(true)
        .idempotent(true)
        .timeout(Duration::from_secs(5))
        .owner("files-team")
        .tags(["files", "read-only"])
    }

    async fn call(&self, args: ReadFileArgs, _cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        let root = Arc::clone(&self.0);
        blocking(move || {
            let resolved = resolve(root.get()?, &args.path)?;
            let text = read_text(&resolved)?;
            let bytes = text.len();
            Ok(ToolOutput::text(text)
                .with_metadata("path", resolved.shown)
                .with_metadata("bytes", bytes.to_string()))
        })
        .await
    }
}

/// Arguments of `list_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListFilesArgs {
    /// The directory to list, relative to the files root; "." (the default)
    /// is the root itself.
    #[serde(default)]
    #[schemars(length(min = 1, max = 4096))]
    path: Option<String>,
}

/// One directory entry.
#[derive(Debug, Serialize)]
struct Listing {
    path: String,
    entries: Vec<String>,
    truncated: bool,
}

/// `list_files`.
struct ListFiles(Arc<Root>);

impl Tool for ListFiles {
    type Args = ListFilesArgs;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(
            "list_files",
            "1.0.0",
            "List the entries of one directory under the files root (not recursive), sorted by \
             name, one per line; directories end with \"/\" (\"notes/\"). Pass a path relative \
             to the files root, or nothing for the root itself; list a subdirectory to look \
             inside it. Use it to find the exact path before read_file, write_file or \
             edit_file. Read-only.",
        )
        .risk(RiskLevel::Low)
        .read_only(true)
        .idempotent(true)
        .timeout(Duration::from_secs(5))
        .owner("files-team")
        .tags(["files", "read-only"])
    }

    async fn call(&self, args: ListFilesArgs, _cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        let root = Arc::clone(&self.0);
        blocking(move || {
            let root = root.get()?;
            let raw = args.path.as_deref().unwrap_or(".");
            let resolved = resolve(root, raw)?;
            let shown = &resolved.shown;
            if !resolved.exists {
                return Err(ToolFailure::new(format!(
                    "directory {shown} does not exist; list its parent to see what is there"
                )));
            }
            if !resolved.path.is_dir() {
                return Err(ToolFailure::new(format!(
                    "{shown} is a file, not a directory; use read_file to read it"
                )));
            }
            let mut entries = Vec::new();
            for entry in fs::read_dir(&resolved.path).map_err(|e| io_failure(shown, &e))? {
                let entry = entry.map_err(|e| io_failure(shown, &e))?;
                let mut name = entry.file_name().to_string_lossy().into_owned();
                let is_dir = match entry.file_type() {
                    Ok(t) if t.is_symlink() => {
                        // Marked as a directory only when it leads to one
                        // inside the root (anything else is refused on use).
                        fs::canonicalize(entry.path())
                            .is_ok_and(|target| target.starts_with(root) && target.is_dir())
                    }
                    Ok(t) => t.is_dir(),
                    Err(_) => false,
                };
                if is_dir {
                    name.push('/');
                }
                entries.push(name);
            }
            entries.sort();
            let truncated = entries.len() > MAX_LIST_ENTRIES;
            let total = entries.len();
            entries.truncate(MAX_LIST_ENTRIES);
            let mut text = if entries.is_empty() {
                format!("{shown} is an empty directory")
            } else {
                entries.join("\n")
            };
            if truncated {
                text.push_str(&format!(
                    "\n... and {} more entries (only the first {MAX_LIST_ENTRIES} are listed)",
                    total - MAX_LIST_ENTRIES
                ));
            }
            Ok(ToolOutput::text(text).with_data(Listing {
                path: resolved.shown,
                entries,
                truncated,
            }))
        })
        .await
    }
}

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteFileArgs {
    /// The file to write, relative to the files root, e.g. "notes/plan.md".
    /// Missing parent directories are created.
    #[schemars(length(min = 1, max = 4096))]
    path: String,
    /// The complete new content of the file (UTF-8 text, at most 1 MiB). It
    /// replaces everything the file held before.
    content: String,
}

/// `write_file`.
struct WriteFile(Arc<Root>);

impl Tool for WriteFile {
    type Args = WriteFileArgs;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(
            "write_file",
            "1.0.0",
            "Create a text file under the files root, or replace an existing file's whole content. \
             Paths are relative to the files root; missing parent directories are created. \
             Overwriting loses the old content: to change part of an existing file, prefer \
             edit_file (after read_file). Returns whether the file was created or overwritten \
             and its size.",
        )
        .risk(RiskLevel::Medium)
        .idempotent(false)
        .timeout(Duration::from_secs(5))
        .owner("files-team")
        .tags(["files", "write"])
    }

    async fn call(&self, args: WriteFileArgs, _cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        let root = Arc::clone(&self.0);
        blocking(move || {
            let resolved = resolve(root.get()?, &args.path)?;
            let created = write_text(&resolved, &args.content)?;
            let bytes = args.content.len();
            let verb = if created { "created" } else { "overwrote" };
            Ok(
                ToolOutput::text(format!("{verb} {} ({bytes} bytes)", resolved.shown)).with_data(
                    serde_json::json!({
                        "path": resolved.shown,
                        "created": created,
                        "bytes": bytes,
                    }),
                ),
            )
        })
        .await
    }
}

/// Arguments of `edit_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EditFileArgs {
    /// The file to edit, relative to the files root: the same path you
    /// passed to read_file.
    #[schemars(length(min = 1, max = 4096))]
    path: String,
    /// The exact text to replace, copied from the file with its whitespace
    /// and indentation. It must occur exactly once: include neighbouring
    /// lines if it could match in several places.
    old_string: String,
    /// The text to put in its place (may be empty to delete `old_string`).
    new_string: String,
}

/// `edit_file`.
struct EditFile(Arc<Root>);

impl Tool for EditFile {
    type Args = EditFileArgs;

    fn info(&self) -> ToolInfo {
        ToolInfo::new(
            "edit_file",
            "1.0.0",
            "Change part of an existing text file: replace the one occurrence of old_string \
             with new_string and keep the rest of the file as it is. Read the file with \
             read_file first (required, on the same path) and copy old_string from it exactly, \
             whitespace included. old_string must match exactly once: if it matches several \
             times, add surrounding lines to make it unique; if it is not found, read the file \
             again. To create a file or replace all of it, use write_file.",
        )
        .risk(RiskLevel::Medium)
        .idempotent(false)
        .timeout(Duration::from_secs(5))
        .owner("files-team")
        .tags(["files", "write"])
        .requires("read_file", "path")
    }

    async fn call(&self, args: EditFileArgs, _cx: CallCx) -> Result<ToolOutput, ToolFailure> {
        if args.old_string.is_empty() {
            return Err(ToolFailure::new(
                "old_string is empty; pass the exact text to replace, copied from read_file \
                 (to create or replace a whole file, use write_file)",
            ));
        }
        if args.old_string == args.new_string {
            return Err(ToolFailure::new(
                "old_string and new_string are the same, so the edit would change nothing; \
                 pass the text you want in new_string",
            ));
        }
        let root = Arc::clone(&self.0);
        blocking(move || {
            let resolved = resolve(root.get()?, &args.path)?;
            let shown = &resolved.shown;
            let text = read_text(&resolved)?;
            let at = match occurrences(&text, &args.old_string) {
                (0, _) => {
                    return Err(ToolFailure::new(format!(
                        "old_string was not found in {shown}; read the file first (read_file) \
                         and copy the text to replace exactly, including whitespace and \
                         indentation"
                    )));
                }
                (1, Some(at)) => at,
                (n, _) => {
                    return Err(ToolFailure::new(format!(
                        "old_string occurs {n} times in {shown}; include more surrounding \
                         context (neighbouring lines) in old_string to make it unique"
                    )));
                }
            };
            let mut edited =
                String::with_capacity(text.len() - args.old_string.len() + args.new_string.len());
            edited.push_str(&text[..at]);
            edited.push_str(&args.new_string);
            edited.push_str(&text[at + args.old_string.len()..]);
            write_text(&resolved, &edited)?;
            let line = text[..at].matches('\n').count() + 1;
            Ok(ToolOutput::text(format!(
                "edited {shown}: replaced 1 occurrence starting on line {line}"
            ))
            .with_data(serde_json::json!({
                "path": resolved.shown,
                "line": line,
                "bytes": edited.len(),
            })))
        })
        .await
    }
}

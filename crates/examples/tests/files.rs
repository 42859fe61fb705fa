//! The `files` example through the SDK's in-process call path (the same
//! path a served call takes): happy paths, edit_file's unique-match rules,
//! confinement to the root, and the spec it registers.

use serde_json::{Value, json};
use std::{
    fs,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, Ordering},
    time::{SystemTime, UNIX_EPOCH},
};
use toolmesh::{
    ToolResultExt,
    pb::{ErrorCode, Precondition, RiskLevel, ToolResult},
};
use toolmesh_examples::{ExampleOptions, example, files};
use toolmesh_executor::Executor;

/// A scratch directory under the system temp dir, removed on drop. It holds
/// `root` (the files root) and `outside` (a sibling the tools must not reach).
struct Scratch {
    base: PathBuf,
}

impl Scratch {
    fn new(tag: &str) -> Self {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let base = std::env::temp_dir().join(format!(
            "toolmesh-files-test-{tag}-{}-{nanos}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(base.join("root")).unwrap();
        fs::create_dir_all(base.join("outside")).unwrap();
        fs::write(base.join("outside/secret.txt"), "top secret\n").unwrap();
        Scratch { base }
    }

    fn root(&self) -> PathBuf {
        self.base.join("root")
    }

    fn outside(&self) -> PathBuf {
        self.base.join("outside")
    }

    /// Writes `content` at `rel` inside the root, creating parents.
    fn put(&self, rel: &str, content: impl AsRef<[u8]>) {
        let path = self.root().join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    fn text(&self, rel: &str) -> String {
        fs::read_to_string(self.root().join(rel)).unwrap()
    }

    /// The `files` executor confined to this scratch root, built the way the
    /// CLI builds it.
    fn executor(&self) -> Executor {
        example(
            "files",
            &ExampleOptions {
                files_root: Some(self.root()),
            },
        )
        .unwrap()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.base);
    }
}

fn code(result: &ToolResult) -> ErrorCode {
    result.error_code()
}

fn message(result: &ToolResult) -> &str {
    result.error_message()
}

fn ok(result: &ToolResult) {
    assert_eq!(code(result), ErrorCode::Unspecified, "{result:?}");
}

/// A TOOL_ERROR whose message contains `needle`.
fn tool_error(result: &ToolResult, needle: &str) {
    assert_eq!(code(result), ErrorCode::ToolError, "{result:?}");
    assert!(
        message(result).contains(needle),
        "{needle:?} not in {:?}",
        message(result)
    );
}

fn data(result: &ToolResult) -> Value {
    serde_json::from_str(&result.data).unwrap_or_else(|e| panic!("{e}: {result:?}"))
}

/// read_file returns a file's text verbatim, for nested paths and for paths
/// with `.` and a `..` that stays inside the root.
#[tokio::test]
async fn read_file_returns_text() {
    let s = Scratch::new("read");
    s.put("README.md", "# Hello\n");
    s.put("notes/todo.txt", "- one\n- two\n");
    let files = s.executor();

    let readme = files.call("read_file", json!({"path": "README.md"})).await;
    ok(&readme);
    assert_eq!(readme.output, "# Hello\n");

    for path in [
        "notes/todo.txt",
        "./notes/todo.txt",
        "notes/../notes/todo.txt",
    ] {
        let todo = files.call("read_file", json!({"path": path})).await;
        ok(&todo);
        assert_eq!(todo.output, "- one\n- two\n", "{path}");
    }

    let missing = files.call("read_file", json!({"path": "nope.txt"})).await;
    tool_error(&missing, "does not exist");
    let dir = files.call("read_file", json!({"path": "notes"})).await;
    tool_error(&dir, "is a directory");
    let unknown = files
        .call("read_file", json!({"path": "README.md", "offset": 1}))
        .await;
    assert_eq!(code(&unknown), ErrorCode::InvalidArguments, "{unknown:?}");
    let no_path = files.call("read_file", json!({})).await;
    assert_eq!(code(&no_path), ErrorCode::InvalidArguments, "{no_path:?}");
}

/// list_files lists the root by default and any subdirectory on request,
/// sorted, directories with a trailing "/"; a file or missing path is a
/// TOOL_ERROR.
#[tokio::test]
async fn list_files_sorted_with_dirs_marked() {
    let s = Scratch::new("list");
    s.put("b.txt", "b");
    s.put("a.txt", "a");
    s.put("notes/todo.txt", "t");
    s.put("notes/deep/x.md", "x");
    fs::create_dir_all(s.root().join("empty")).unwrap();
    let files = s.executor();

    let root = files.call("list_files", json!({})).await;
    ok(&root);
    assert_eq!(root.output, "a.txt\nb.txt\nempty/\nnotes/");
    assert_eq!(
        data(&root)["entries"],
        json!(["a.txt", "b.txt", "empty/", "notes/"])
    );
    let dot = files.call("list_files", json!({"path": "."})).await;
    assert_eq!(dot.output, root.output);

    let notes = files.call("list_files", json!({"path": "notes"})).await;
    ok(&notes);
    assert_eq!(notes.output, "deep/\ntodo.txt");

    let empty = files.call("list_files", json!({"path": "empty"})).await;
    ok(&empty);
    assert_eq!(data(&empty)["entries"], json!([]));

    let file = files.call("list_files", json!({"path": "a.txt"})).await;
    tool_error(&file, "not a directory");
    let missing = files.call("list_files", json!({"path": "nope"})).await;
    tool_error(&missing, "does not exist");
}

/// write_file creates a file (and its missing parent directories), then
/// overwrites it, saying which happened.
#[tokio::test]
async fn write_file_creates_and_overwrites() {
    let s = Scratch::new("write");
    let files = s.executor();

    let created = files
        .call(
            "write_file",
            json!({"path": "plans/q3/plan.md", "content": "draft\n"}),
        )
        .await;
    ok(&created);
    assert_eq!(created.output, "created plans/q3/plan.md (6 bytes)");
    assert_eq!(data(&created)["created"], json!(true));
    assert_eq!(s.text("plans/q3/plan.md"), "draft\n");

    let overwritten = files
        .call(
            "write_file",
            json!({"path": "plans/q3/plan.md", "content": "final\n"}),
        )
        .await;
    ok(&overwritten);
    assert!(
        overwritten.output.starts_with("overwrote"),
        "{overwritten:?}"
    );
    assert_eq!(s.text("plans/q3/plan.md"), "final\n");

    let read_back = files
        .call("read_file", json!({"path": "plans/q3/plan.md"}))
        .await;
    assert_eq!(read_back.output, "final\n");

    let onto_dir = files
        .call("write_file", json!({"path": "plans", "content": "x"}))
        .await;
    tool_error(&onto_dir, "is a directory");
    let under_file = files
        .call(
            "write_file",
            json!({"path": "plans/q3/plan.md/x", "content": "x"}),
        )
        .await;
    tool_error(&under_file, "not a directory");
    let no_content = files.call("write_file", json!({"path": "a.txt"})).await;
    assert_eq!(code(&no_content), ErrorCode::InvalidArguments);
}

/// edit_file replaces exactly one occurrence: zero matches, several matches
/// (overlapping ones too), an empty old_string and old_string == new_string
/// are TOOL_ERRORs that leave the file untouched.
#[tokio::test]
async fn edit_file_unique_match_rules() {
    let s = Scratch::new("edit");
    let original = "fn main() {\n    let x = 1;\n    let y = 1;\n}\n";
    s.put("src/main.rs", original);
    let files = s.executor();
    let edit = |old: &str, new: &str| {
        files.call(
            "edit_file",
            json!({"path": "src/main.rs", "old_string": old, "new_string": new}),
        )
    };

    let zero = edit("let z = 1;", "let z = 2;").await;
    tool_error(&zero, "not found");
    tool_error(&zero, "read the file first");

    let several = edit(" = 1;", " = 2;").await;
    tool_error(&several, "occurs 2 times");
    tool_error(&several, "more surrounding context");

    s.put("overlap.txt", "aaa");
    let overlapping = files
        .call(
            "edit_file",
            json!({"path": "overlap.txt", "old_string": "aa", "new_string": "b"}),
        )
        .await;
    tool_error(&overlapping, "occurs 2 times");
    assert_eq!(s.text("overlap.txt"), "aaa");

    let empty = edit("", "x").await;
    tool_error(&empty, "old_string is empty");
    let same = edit("let x = 1;", "let x = 1;").await;
    tool_error(&same, "the same");
    assert_eq!(s.text("src/main.rs"), original);

    let one = edit("let y = 1;", "let y = 2;").await;
    ok(&one);
    assert_eq!(
        one.output,
        "edited src/main.rs: replaced 1 occurrence starting on line 3"
    );
    assert_eq!(
        s.text("src/main.rs"),
        "fn main() {\n    let x = 1;\n    let y = 2;\n}\n"
    );

    let delete = edit("    let x = 1;\n", "").await;
    ok(&delete);
    assert_eq!(s.text("src/main.rs"), "fn main() {\n    let y = 2;\n}\n");

    let missing = files
        .call(
            "edit_file",
            json!({"path": "nope.rs", "old_string": "a", "new_string": "b"}),
        )
        .await;
    tool_error(&missing, "does not exist");
}

/// Absolute paths, `..` escapes (leading or after a directory) are refused
/// by every tool with a TOOL_ERROR saying paths must stay inside the root,
/// and nothing is written outside.
#[tokio::test]
async fn escapes_are_refused() {
    let s = Scratch::new("escape");
    s.put("a/keep.txt", "k");
    let files = s.executor();
    let secret = s.outside().join("secret.txt");
    let absolute = secret.to_string_lossy().into_owned();

    for path in [
        "../x",
        "../outside/secret.txt",
        "/etc/passwd",
        absolute.as_str(),
        "a/../../x",
        "a/../../outside/secret.txt",
        "./../x",
    ] {
        for (tool, args) in [
            ("read_file", json!({"path": path})),
            ("list_files", json!({"path": path})),
            ("write_file", json!({"path": path, "content": "pwned"})),
            (
                "edit_file",
                json!({"path": path, "old_string": "top", "new_string": "pwned"}),
            ),
        ] {
            let result = files.call(tool, args).await;
            tool_error(&result, "paths must stay inside the root");
            assert!(!result.output.contains("top secret"), "{tool} {path}");
        }
    }
    assert_eq!(fs::read_to_string(&secret).unwrap(), "top secret\n");
    assert!(!s.base.join("x").exists());
    assert!(!s.outside().join("x").exists());
}

/// A symbolic link inside the root that points outside (to a file or to a
/// directory) cannot be read, listed, written or edited through, and no new
/// file can be created beneath it.
#[cfg(unix)]
#[tokio::test]
async fn symlinks_out_of_the_root_are_refused() {
    use std::os::unix::fs::symlink;
    let s = Scratch::new("symlink-out");
    let files = s.executor();
    let secret = s.outside().join("secret.txt");
    symlink(&secret, s.root().join("leak.txt")).unwrap();
    symlink(s.outside(), s.root().join("out")).unwrap();
    fs::create_dir_all(s.root().join("sub")).unwrap();
    symlink("../../outside", s.root().join("sub/up")).unwrap();

    for path in ["leak.txt", "out/secret.txt", "sub/up/secret.txt", "out"] {
        let read = files.call("read_file", json!({"path": path})).await;
        tool_error(&read, "paths must stay inside the root");
        assert!(!read.output.contains("top secret"));
        let write = files
            .call("write_file", json!({"path": path, "content": "pwned"}))
            .await;
        tool_error(&write, "paths must stay inside the root");
        let edit = files
            .call(
                "edit_file",
                json!({"path": path, "old_string": "top", "new_string": "pwned"}),
            )
            .await;
        tool_error(&edit, "paths must stay inside the root");
    }
    let new_beneath = files
        .call(
            "write_file",
            json!({"path": "out/new/x.txt", "content": "x"}),
        )
        .await;
    tool_error(&new_beneath, "paths must stay inside the root");
    let list = files.call("list_files", json!({"path": "out"})).await;
    tool_error(&list, "paths must stay inside the root");

    // A dangling link could be created through; it is refused too.
    symlink(s.outside().join("later.txt"), s.root().join("dangling")).unwrap();
    let dangling = files
        .call("write_file", json!({"path": "dangling", "content": "x"}))
        .await;
    tool_error(&dangling, "paths must stay inside the root");

    assert_eq!(fs::read_to_string(&secret).unwrap(), "top secret\n");
    assert!(!s.outside().join("new").exists());
    assert!(!s.outside().join("later.txt").exists());

    // Listing the root shows the links but does not mark the outside
    // directory as one of the root's directories.
    let root = files.call("list_files", json!({})).await;
    ok(&root);
    assert_eq!(
        data(&root)["entries"],
        json!(["dangling", "leak.txt", "out", "sub/"])
    );
}

/// A symbolic link inside the root that points inside it works for reads,
/// listing, writes and edits, which land on the link's target.
#[cfg(unix)]
#[tokio::test]
async fn symlinks_inside_the_root_are_allowed() {
    use std::os::unix::fs::symlink;
    let s = Scratch::new("symlink-in");
    s.put("real/notes.txt", "hello world\n");
    symlink("real/notes.txt", s.root().join("alias.txt")).unwrap();
    symlink(s.root().join("real"), s.root().join("linked")).unwrap();
    let files = s.executor();

    let read = files.call("read_file", json!({"path": "alias.txt"})).await;
    ok(&read);
    assert_eq!(read.output, "hello world\n");
    let through_dir = files
        .call("read_file", json!({"path": "linked/notes.txt"}))
        .await;
    ok(&through_dir);
    let list = files.call("list_files", json!({"path": "linked"})).await;
    ok(&list);
    assert_eq!(list.output, "notes.txt");
    let root = files.call("list_files", json!({})).await;
    assert_eq!(
        data(&root)["entries"],
        json!(["alias.txt", "linked/", "real/"])
    );

    let edit = files
        .call(
            "edit_file",
            json!({"path": "alias.txt", "old_string": "world", "new_string": "mesh"}),
        )
        .await;
    ok(&edit);
    assert_eq!(s.text("real/notes.txt"), "hello mesh\n");
    let write = files
        .call(
            "write_file",
            json!({"path": "linked/new.txt", "content": "via link"}),
        )
        .await;
    ok(&write);
    assert_eq!(s.text("real/new.txt"), "via link");
    assert!(
        fs::symlink_metadata(s.root().join("alias.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

/// read_file (and edit_file) refuse binary files and files over 1 MiB with a
/// TOOL_ERROR saying why; exactly 1 MiB is still read; write_file refuses
/// content over 1 MiB.
#[tokio::test]
async fn binary_and_oversized_files_are_refused() {
    let s = Scratch::new("binary");
    s.put("image.png", [0x89, b'P', b'N', b'G', 0, 0, 0, 13]);
    s.put("latin1.txt", [b'c', b'a', b'f', 0xe9]);
    let limit = files::MAX_FILE_BYTES as usize;
    s.put("big.log", vec![b'a'; limit + 1]);
    s.put("exact.log", vec![b'a'; limit]);
    let files = s.executor();

    for path in ["image.png", "latin1.txt"] {
        let read = files.call("read_file", json!({"path": path})).await;
        tool_error(&read, "not UTF-8 text");
        let edit = files
            .call(
                "edit_file",
                json!({"path": path, "old_string": "c", "new_string": "d"}),
            )
            .await;
        tool_error(&edit, "not UTF-8 text");
    }
    let big = files.call("read_file", json!({"path": "big.log"})).await;
    tool_error(&big, "1048577 bytes, over the 1 MiB");
    let exact = files.call("read_file", json!({"path": "exact.log"})).await;
    ok(&exact);
    assert_eq!(exact.output.len(), limit);

    let too_much = files
        .call(
            "write_file",
            json!({"path": "huge.txt", "content": "a".repeat(limit + 1)}),
        )
        .await;
    tool_error(&too_much, "over the 1 MiB");
    assert!(!s.root().join("huge.txt").exists());
}

/// The registered specs: edit_file carries the precondition
/// {read_file, path} and is MEDIUM and not idempotent; read_file and
/// list_files are LOW and idempotent; write_file is MEDIUM with no
/// precondition; every schema forbids extra properties and requires path
/// where a path is needed.
#[test]
fn registered_specs() {
    let specs = files::executor(None).specs();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["edit_file", "list_files", "read_file", "write_file"]
    );
    for spec in &specs {
        toolmesh::ToolDef::new(spec.clone()).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        let schema: Value = serde_json::from_str(&spec.input_schema).unwrap();
        assert_eq!(
            schema["additionalProperties"],
            json!(false),
            "{}",
            spec.name
        );
        let required = schema["required"].as_array().cloned().unwrap_or_default();
        let (risk, idempotent, preconditions, must) = match spec.name.as_str() {
            "read_file" => (RiskLevel::Low, true, vec![], vec!["path"]),
            "list_files" => (RiskLevel::Low, true, vec![], vec![]),
            "write_file" => (RiskLevel::Medium, false, vec![], vec!["path", "content"]),
            "edit_file" => (
                RiskLevel::Medium,
                false,
                vec![Precondition {
                    tool: "read_file".into(),
                    same_argument: "path".into(),
                }],
                vec!["path", "old_string", "new_string"],
            ),
            other => panic!("unexpected tool {other}"),
        };
        assert_eq!(spec.risk, risk as i32, "{}", spec.name);
        assert_eq!(spec.idempotent, idempotent, "{}", spec.name);
        assert_eq!(spec.preconditions, preconditions, "{}", spec.name);
        assert!(spec.deprecated.is_empty(), "{}", spec.name);
        let mut required: Vec<&str> = required.iter().filter_map(Value::as_str).collect();
        required.sort_unstable();
        let mut must = must;
        must.sort_unstable();
        assert_eq!(required, must, "{}", spec.name);
    }
}

/// Without a configured root, the executor uses `toolmesh-files-<pid>` under
/// the temp dir, created on first call and seeded with the fixtures; a
/// configured root that does not exist yet is created.
#[tokio::test]
async fn default_and_missing_roots() {
    let files = example("files", &ExampleOptions::default()).unwrap();
    let readme = files.call("read_file", json!({"path": "README.md"})).await;
    ok(&readme);
    assert!(readme.output.contains("files"), "{}", readme.output);
    let root = files.call("list_files", json!({})).await;
    ok(&root);
    assert_eq!(root.output, "README.md\nnotes/");
    let todo = files
        .call("read_file", json!({"path": "notes/todo.txt"}))
        .await;
    ok(&todo);
    let dir = files::default_root();
    assert!(
        dir.ends_with(format!("toolmesh-files-{}", std::process::id())),
        "{}",
        dir.display()
    );
    assert!(dir.join("notes/todo.txt").is_file());
    let _ = fs::remove_dir_all(&dir);

    let s = Scratch::new("fresh");
    let nested: &Path = &s.base.join("not/yet/here");
    let files = files::executor(Some(nested.to_path_buf()));
    let listed = files.call("list_files", json!({})).await;
    ok(&listed);
    assert!(nested.is_dir());
}

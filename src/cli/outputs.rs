//! Every path a command will write, checked before any work starts: a file the user gave
//! as input (or the result cache) is never overwritten, a folder is never taken for a
//! file, and a path whose folder cannot be written is refused then, not after an hour of
//! model calls. What is refused is the user's to fix (exit 2), and nothing is created.
//!
//! Paths are compared as the file system resolves them: links followed, `.` and `..`
//! removed, and on Unix the same file under two names (a hard link) recognised by its
//! device and inode.

use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context as _, Result};

/// What a command reads and what it will write, each named by its flag.
#[derive(Debug, Default)]
pub struct PlannedPaths {
    inputs: Vec<(&'static str, PathBuf)>,
    outputs: Vec<(String, PathBuf)>,
    folders: Vec<(&'static str, PathBuf)>,
}

impl PlannedPaths {
    pub fn new() -> Self {
        Self::default()
    }

    /// A file the command reads (`flag` names it in messages).
    pub fn input(mut self, flag: &'static str, path: &Path) -> Self {
        self.inputs.push((flag, path.to_path_buf()));
        self
    }

    /// Files the command reads, when given.
    pub fn inputs<'a>(
        mut self,
        flag: &'static str,
        paths: impl IntoIterator<Item = &'a Path>,
    ) -> Self {
        for path in paths {
            self.inputs.push((flag, path.to_path_buf()));
        }
        self
    }

    /// A file the command reads, when given.
    pub fn maybe_input(self, flag: &'static str, path: Option<&Path>) -> Self {
        self.inputs(flag, path)
    }

    /// The result cache the command opens (unless `--no-cache`): never to be written over.
    pub fn cache(mut self, cache: &super::cache_args::CacheArgs) -> Self {
        if let Some(file) = cache.file() {
            self.inputs.push(("--cache", file));
        }
        self
    }

    /// A file the command will write, when given.
    pub fn output(mut self, flag: &str, path: Option<&Path>) -> Self {
        if let Some(path) = path {
            self.outputs.push((flag.to_string(), path.to_path_buf()));
        }
        self
    }

    /// A folder the command will write files into (created if missing).
    pub fn folder(mut self, flag: &'static str, path: &Path) -> Self {
        self.folders.push((flag, path.to_path_buf()));
        self
    }

    /// Check every output (see the module documentation); the first problem found, as an
    /// input error.
    pub fn check(&self) -> Result<()> {
        self.check_all().map_err(super::input_error)
    }

    fn check_all(&self) -> Result<()> {
        let inputs: Vec<(&str, Resolved)> = self
            .inputs
            .iter()
            .map(|(flag, path)| Ok((*flag, Resolved::of(path)?)))
            .collect::<Result<_>>()?;
        let mut written: Vec<(&str, &Path, Resolved)> = Vec::new();
        for (flag, path) in &self.outputs {
            check_writable(flag, path)?;
            let resolved = Resolved::of(path)?;
            if let Some((input_flag, _)) = inputs.iter().find(|(_, input)| input.same(&resolved)) {
                bail!(
                    "{flag} {} is the file given to {input_flag}: writing it would destroy what \
                     the command reads; give another path",
                    path.display()
                );
            }
            if let Some((other, _, _)) = written.iter().find(|(_, _, w)| w.same(&resolved)) {
                bail!(
                    "{flag} {} is also the path of {other}: one would overwrite the other; give \
                     each its own path",
                    path.display()
                );
            }
            written.push((flag, path, resolved));
        }
        for (flag, folder) in &self.folders {
            if folder.exists() && !folder.is_dir() {
                bail!(
                    "{flag} {} is a file: give a folder to write into",
                    folder.display()
                );
            }
            let existing = nearest_existing(folder);
            if !existing.is_dir() {
                bail!(
                    "{flag} {}: {} is a file, not a folder, so nothing can be written under it",
                    folder.display(),
                    existing.display()
                );
            }
            tempfile::tempfile_in(&existing).with_context(|| {
                format!(
                    "{flag} {}: cannot create files in {}",
                    folder.display(),
                    existing.display()
                )
            })?;
        }
        Ok(())
    }
}

/// `path` can be written as a file: not a folder, and its nearest existing ancestor is a
/// folder we may create files in (checked by creating and removing an unnamed file there;
/// folders that do not exist yet are created only when the output is written).
fn check_writable(flag: &str, path: &Path) -> Result<()> {
    let shown = path.display();
    if path.as_os_str().is_empty() {
        bail!("{flag} is empty: give a file path");
    }
    if path.is_dir()
        || path
            .as_os_str()
            .to_string_lossy()
            .ends_with(std::path::MAIN_SEPARATOR)
    {
        bail!(
            "{flag} {shown} is a folder: give a file path (for example {})",
            path.join(example_file(flag)).display()
        );
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let existing = nearest_existing(parent);
    if !existing.is_dir() {
        bail!(
            "{flag} {shown}: {} is a file, not a folder, so nothing can be written under it",
            existing.display()
        );
    }
    tempfile::tempfile_in(&existing).with_context(|| {
        format!(
            "{flag} {shown}: cannot create files in {}",
            existing.display()
        )
    })?;
    Ok(())
}

/// A file name that suits what `flag` writes, for the example in "is a folder".
fn example_file(flag: &str) -> &'static str {
    match flag {
        "--report" => "report.html",
        "--figure" => "figure.svg",
        "--steps-out" => "steps.txt",
        "--comparisons-out" => "comparisons.jsonl",
        _ => "out.jsonl",
    }
}

/// `path` itself if it exists, else its nearest existing ancestor (`.` for a relative
/// path none of whose folders exist).
fn nearest_existing(path: &Path) -> PathBuf {
    let mut existing = path;
    while !existing.exists() {
        match existing.parent() {
            Some(up) if !up.as_os_str().is_empty() => existing = up,
            _ => return PathBuf::from("."),
        }
    }
    existing.to_path_buf()
}

/// A path as the file system resolves it, and the file's identity where it exists.
#[derive(Debug)]
struct Resolved {
    path: PathBuf,
    #[cfg(unix)]
    identity: Option<(u64, u64)>,
}

impl Resolved {
    fn of(path: &Path) -> Result<Self> {
        let resolved = match path.canonicalize() {
            Ok(full) => full,
            // Not there yet: resolve the deepest existing ancestor and append the rest.
            Err(_) => resolve_missing(path)?,
        };
        Ok(Self {
            #[cfg(unix)]
            identity: std::fs::metadata(&resolved).ok().map(|m| {
                use std::os::unix::fs::MetadataExt as _;
                (m.dev(), m.ino())
            }),
            path: resolved,
        })
    }

    fn same(&self, other: &Resolved) -> bool {
        #[cfg(unix)]
        if let (Some(a), Some(b)) = (self.identity, other.identity) {
            return a == b;
        }
        self.path == other.path
    }
}

/// The absolute form of a path that does not exist (yet): `.` and `..` applied, then
/// its deepest existing ancestor canonicalised (links followed) and the missing names
/// appended.
fn resolve_missing(path: &Path) -> Result<PathBuf> {
    let absolute = lexical(
        &std::env::current_dir()
            .context("cannot read the current folder")?
            .join(path),
    );
    let mut base = absolute.as_path();
    let mut missing = Vec::new();
    loop {
        if let Ok(mut resolved) = base.canonicalize() {
            for name in missing.into_iter().rev() {
                resolved.push(name);
            }
            return Ok(resolved);
        }
        match (base.file_name(), base.parent()) {
            (Some(name), Some(up)) => {
                missing.push(name);
                base = up;
            }
            _ => return Ok(absolute),
        }
    }
}

/// `path` with `.` dropped and `..` applied, without touching the file system.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(paths: PlannedPaths) -> String {
        format!("{:#}", paths.check_all().expect_err("refused"))
    }

    #[test]
    fn an_output_that_is_an_input_is_refused_however_it_is_spelled() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("same.jsonl");
        std::fs::write(&input, "{}\n").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let spellings = [
            input.clone(),
            dir.path().join("sub/../same.jsonl"),
            dir.path().join("./same.jsonl"),
        ];
        for output in spellings {
            let message = refused(
                PlannedPaths::new()
                    .input("--input", &input)
                    .output("--output", Some(&output)),
            );
            assert!(
                message.contains("is the file given to --input"),
                "{message}"
            );
        }
        #[cfg(unix)]
        {
            let link = dir.path().join("link.jsonl");
            std::os::unix::fs::symlink(&input, &link).unwrap();
            let hard = dir.path().join("hard.jsonl");
            std::fs::hard_link(&input, &hard).unwrap();
            for output in [link, hard] {
                let message = refused(
                    PlannedPaths::new()
                        .input("--input", &input)
                        .output("--report", Some(&output)),
                );
                assert!(message.starts_with("--report "), "{message}");
            }
        }
        assert_eq!(std::fs::read_to_string(&input).unwrap(), "{}\n");
    }

    #[test]
    fn folders_unwritable_parents_and_shared_outputs_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("out");
        std::fs::create_dir(&folder).unwrap();
        let message = refused(PlannedPaths::new().output("--output", Some(&folder)));
        assert!(message.contains("is a folder"), "{message}");
        assert!(message.contains("out/out.jsonl)"), "{message}");
        // Issue 60: the example suits what the flag writes.
        let message = refused(PlannedPaths::new().output("--report", Some(&folder)));
        assert!(
            message.contains("is a folder: give a file path (for example")
                && message.contains("out/report.html)")
                && !message.contains("out.jsonl"),
            "{message}"
        );

        let file = dir.path().join("plain.txt");
        std::fs::write(&file, "x").unwrap();
        let under_file = file.join("deeper/out.jsonl");
        let message = refused(PlannedPaths::new().output("--output", Some(&under_file)));
        assert!(message.contains("is a file, not a folder"), "{message}");

        let a = dir.path().join("a.jsonl");
        let message = refused(
            PlannedPaths::new()
                .output("--output", Some(&a))
                .output("--comparisons-out", Some(&dir.path().join("x/../a.jsonl"))),
        );
        assert!(message.contains("also the path of --output"), "{message}");

        // A path in folders that do not exist yet is fine, and nothing is created.
        let fresh = dir.path().join("new/deeper/out.jsonl");
        PlannedPaths::new()
            .input("--input", &file)
            .output("--output", Some(&fresh))
            .check_all()
            .unwrap();
        assert!(!dir.path().join("new").exists());
    }

    #[cfg(unix)]
    #[test]
    fn a_folder_without_write_permission_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let locked = dir.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
        let result = PlannedPaths::new()
            .output("--output", Some(&locked.join("out.jsonl")))
            .check_all();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Root may write anywhere: then the check rightly passes.
        if let Err(error) = result {
            assert!(format!("{error:#}").contains("cannot create files in"));
        }
    }
}

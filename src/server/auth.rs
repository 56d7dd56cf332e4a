//! Bearer tokens, one per user, read from a token file that can be reloaded.
//!
//! The token file holds one token per line, `name:token`, so that each user (or client
//! program) has a token of its own: the log and `/healthz` say which name made each
//! request, and one leaked token is revoked by deleting its line and reloading, without
//! touching the others. Blank lines and lines starting with `#` are skipped. A line
//! without a `:` is a token named `default`: the single-token file of earlier versions
//! keeps working. Names are 1 to 64 characters of letters, digits, `.`, `_` and `-`, each
//! used once; a token is at least one character without whitespace, each token used
//! once. Errors name the file and the line, never the token.
//!
//! Tokens are kept as sha256 digests and a presented token is compared with every one
//! through a comparison whose time does not depend on where they differ, so neither a
//! token's content, its length, nor which entry it matched leaks through response times.
//!
//! [`Tokens`] is the set the service checks requests against; [`Tokens::reload`] reads
//! the file again (on SIGHUP, by `nlg-judge serve`) and swaps the set in one step:
//! requests already authenticated go on, the next ones are checked against the new set,
//! and a file that does not read keeps the previous set.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use anyhow::{bail, Context as _, Result};
use sha2::{Digest, Sha256};

/// The name of a token given on a line without a name (the single-token file).
pub const DEFAULT_TOKEN_NAME: &str = "default";

/// Longest token name.
const MAX_NAME_CHARS: usize = 64;

/// Tokens shorter than this are accepted with a warning (guessable).
pub const SHORT_TOKEN_CHARS: usize = 16;

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Equal digests, in time independent of their content.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

/// One named token.
#[derive(Clone)]
struct Entry {
    name: Arc<str>,
    digest: [u8; 32],
    /// Whether the token is shorter than [`SHORT_TOKEN_CHARS`].
    short: bool,
}

/// A set of named tokens (never printed: its `Debug` shows the names only).
#[derive(Clone)]
pub struct TokenSet {
    entries: Vec<Entry>,
}

impl std::fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSet")
            .field("names", &self.names())
            .finish()
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn check_token(token: &str) -> Result<()> {
    if token.is_empty() {
        bail!("the token is empty");
    }
    if token.chars().any(char::is_whitespace) {
        bail!("the token contains whitespace");
    }
    Ok(())
}

impl TokenSet {
    /// One token under `name`.
    pub fn single(name: &str, token: &str) -> Result<Self> {
        Self::from_pairs(&[(name, token)])
    }

    /// Tokens given as `(name, token)` pairs (names and tokens unique).
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Result<Self> {
        let mut set = Self {
            entries: Vec::new(),
        };
        for (index, (name, token)) in pairs.iter().enumerate() {
            set.add(name, token.trim())
                .with_context(|| format!("token {}", index + 1))?;
        }
        set.non_empty()?;
        Ok(set)
    }

    /// Read a token file's text (`origin` names it in errors; see the module header).
    pub fn parse(text: &str, origin: &Path) -> Result<Self> {
        let mut set = Self {
            entries: Vec::new(),
        };
        let mut lines_of: Vec<usize> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, token) = match line.split_once(':') {
                Some((name, token)) => (name.trim(), token.trim()),
                None => (DEFAULT_TOKEN_NAME, line),
            };
            let at =
                |what: String| format!("token file {} line {number}: {what}", origin.display());
            if !valid_name(name) {
                // The text before `:` is not echoed: it may be part of a token.
                bail!(at(format!(
                    "the name before `:` must be 1 to {MAX_NAME_CHARS} letters, digits, `.`, `_` or `-`"
                )));
            }
            if let Some(k) = set.entries.iter().position(|e| &*e.name == name) {
                bail!(at(format!(
                    "the name `{name}` is used on line {} already (each name once; a line without `:` is named `{DEFAULT_TOKEN_NAME}`)",
                    lines_of[k]
                )));
            }
            check_token(token).map_err(|e| anyhow::anyhow!(at(format!("{e} (`{name}`)"))))?;
            let new = digest(token.as_bytes());
            if let Some(k) = set.entries.iter().position(|e| e.digest == new) {
                bail!(at(format!(
                    "the token of `{name}` is the token of `{}` (line {}): each user needs a token of its own",
                    set.entries[k].name, lines_of[k]
                )));
            }
            set.push(name, token);
            lines_of.push(number);
        }
        set.non_empty()
            .with_context(|| format!("token file {}", origin.display()))?;
        Ok(set)
    }

    /// The token file at `path`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read token file {}", path.display()))?;
        Self::parse(&text, path)
    }

    fn add(&mut self, name: &str, token: &str) -> Result<()> {
        if !valid_name(name) {
            bail!("a token name must be 1 to {MAX_NAME_CHARS} letters, digits, `.`, `_` or `-`");
        }
        if self.entries.iter().any(|e| &*e.name == name) {
            bail!("the name `{name}` is used twice");
        }
        check_token(token)?;
        let new = digest(token.as_bytes());
        if self.entries.iter().any(|e| e.digest == new) {
            bail!("the token of `{name}` is another name's token");
        }
        self.push(name, token);
        Ok(())
    }

    fn push(&mut self, name: &str, token: &str) {
        self.entries.push(Entry {
            name: name.into(),
            digest: digest(token.as_bytes()),
            short: token.chars().count() < SHORT_TOKEN_CHARS,
        });
    }

    fn non_empty(&self) -> Result<()> {
        if self.entries.is_empty() {
            bail!("no token (one `name:token` per line; `#` starts a comment)");
        }
        Ok(())
    }

    /// The names, in file order.
    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|e| &*e.name).collect()
    }

    /// The names of tokens shorter than [`SHORT_TOKEN_CHARS`] characters.
    pub fn short_names(&self) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|e| e.short)
            .map(|e| &*e.name)
            .collect()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The name of the token an `Authorization` header value carries, if it is one of
    /// this set's. Every entry is compared, whichever matches.
    pub fn identify(&self, authorization: Option<&[u8]>) -> Option<Arc<str>> {
        let value = authorization?;
        let presented = value
            .strip_prefix(b"Bearer ")
            .or_else(|| value.strip_prefix(b"bearer "))?;
        let presented = digest(presented.trim_ascii());
        let mut found = None;
        for entry in &self.entries {
            if constant_time_eq(&presented, &entry.digest) {
                found = Some(entry.name.clone());
            }
        }
        found
    }
}

/// The tokens the service checks requests against, shared by every handler; reloadable
/// when read from a file.
#[derive(Clone)]
pub struct Tokens {
    inner: Arc<Shared>,
}

struct Shared {
    path: Option<PathBuf>,
    current: RwLock<Arc<TokenSet>>,
    reloads: AtomicUsize,
    /// The error of the last reload when it failed (cleared by one that succeeds).
    last_error: Mutex<Option<String>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("path", &self.inner.path)
            .field("set", &*self.current())
            .finish()
    }
}

/// What `/healthz` says of the tokens (names, never tokens).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TokensStatus {
    pub tokens: usize,
    pub reloads: usize,
    pub last_reload_error: Option<String>,
}

impl Tokens {
    /// A set that never changes.
    pub fn fixed(set: TokenSet) -> Self {
        Self::new(None, set)
    }

    /// The token file at `path`, reloadable.
    pub fn from_file(path: &Path) -> Result<Self> {
        let set = TokenSet::from_file(path)?;
        Ok(Self::new(Some(path.to_path_buf()), set))
    }

    fn new(path: Option<PathBuf>, set: TokenSet) -> Self {
        Self {
            inner: Arc::new(Shared {
                path,
                current: RwLock::new(Arc::new(set)),
                reloads: AtomicUsize::new(0),
                last_error: Mutex::new(None),
            }),
        }
    }

    /// The file the tokens come from.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// The set now in force.
    pub fn current(&self) -> Arc<TokenSet> {
        match self.inner.current.read() {
            Ok(set) => set.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// See [`TokenSet::identify`], against the set now in force.
    pub fn identify(&self, authorization: Option<&[u8]>) -> Option<Arc<str>> {
        self.current().identify(authorization)
    }

    /// Read the file again and put its set in force; on an error the set in force stays
    /// (and the error is kept for `/healthz`). Requests already authenticated are not
    /// affected either way. The new set.
    pub fn reload(&self) -> Result<Arc<TokenSet>> {
        let Some(path) = &self.inner.path else {
            bail!("these tokens were not read from a file: nothing to reload");
        };
        let read = TokenSet::from_file(path);
        let mut last_error = match self.inner.last_error.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        match read {
            Ok(set) => {
                let set = Arc::new(set);
                match self.inner.current.write() {
                    Ok(mut current) => *current = set.clone(),
                    Err(poisoned) => *poisoned.into_inner() = set.clone(),
                }
                self.inner.reloads.fetch_add(1, Ordering::SeqCst);
                *last_error = None;
                Ok(set)
            }
            Err(error) => {
                *last_error = Some(format!("{error:#}"));
                Err(error.context("the token file did not reload; the previous tokens stay"))
            }
        }
    }

    pub fn status(&self) -> TokensStatus {
        TokensStatus {
            tokens: self.current().len(),
            reloads: self.inner.reloads.load(Ordering::SeqCst),
            last_reload_error: match self.inner.last_error.lock() {
                Ok(guard) => guard.clone(),
                Err(poisoned) => poisoned.into_inner().clone(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<TokenSet> {
        TokenSet::parse(text, Path::new("tokens.txt"))
    }

    fn message(result: Result<TokenSet>) -> String {
        format!("{:#}", result.unwrap_err())
    }

    #[test]
    fn only_the_exact_bearer_token_is_accepted() {
        let set = TokenSet::single("ci", "s3cret\n").unwrap();
        let name = |header: &[u8]| set.identify(Some(header)).map(|n| n.to_string());
        assert_eq!(name(b"Bearer s3cret").as_deref(), Some("ci"));
        assert_eq!(name(b"bearer s3cret").as_deref(), Some("ci"));
        assert!(set.identify(None).is_none());
        for wrong in [
            &b"Bearer s3cre"[..],
            b"Bearer s3cret2",
            b"Basic s3cret",
            b"s3cret",
        ] {
            assert!(name(wrong).is_none(), "{}", String::from_utf8_lossy(wrong));
        }
        assert!(TokenSet::single("ci", "  ").is_err());
        assert!(TokenSet::single("ci", "a b").is_err());
        assert!(TokenSet::single("a b", "token").is_err());
        assert!(!format!("{set:?}").contains("s3cret"));
    }

    #[test]
    fn a_file_names_each_token_and_the_old_single_token_file_is_named_default() {
        let set = parse("# team tokens\n\nalice:tok-alice-0001\n  bob : tok-bob-0002  \nci-2.x:tok:with:colons\n").unwrap();
        assert_eq!(set.names(), ["alice", "bob", "ci-2.x"]);
        let who = |token: &str| {
            set.identify(Some(format!("Bearer {token}").as_bytes()))
                .map(|n| n.to_string())
        };
        assert_eq!(who("tok-alice-0001").as_deref(), Some("alice"));
        assert_eq!(who("tok-bob-0002").as_deref(), Some("bob"));
        // Split at the first colon: the token may hold more.
        assert_eq!(who("tok:with:colons").as_deref(), Some("ci-2.x"));
        assert_eq!(who("tok-carol-0003"), None);

        let old = parse("abc\n").unwrap();
        assert_eq!(old.names(), [DEFAULT_TOKEN_NAME]);
        assert_eq!(
            old.identify(Some(b"Bearer abc")).as_deref(),
            Some(DEFAULT_TOKEN_NAME)
        );
        assert_eq!(old.short_names(), [DEFAULT_TOKEN_NAME]);
    }

    #[test]
    fn bad_lines_are_named_by_file_and_line_without_the_token() {
        let error = message(parse("alice:tok-1\nalice:tok-2-secret\n"));
        assert!(
            error.contains("tokens.txt line 2")
                && error.contains("`alice`")
                && error.contains("line 1"),
            "{error}"
        );
        assert!(!error.contains("tok-2-secret"), "{error}");

        let error = message(parse("alice:same-secret\nbob:same-secret\n"));
        assert!(
            error.contains("line 2") && error.contains("`alice`"),
            "{error}"
        );
        assert!(!error.contains("same-secret"), "{error}");

        let error = message(parse("# one\nal ice:secret-one\n"));
        assert!(
            error.contains("line 2") && error.contains("name"),
            "{error}"
        );
        assert!(!error.contains("secret-one"), "{error}");

        let error = message(parse("alice:\n"));
        assert!(
            error.contains("line 1") && error.contains("empty"),
            "{error}"
        );
        let error = message(parse("bob:two words\n"));
        assert!(error.contains("whitespace"), "{error}");
        assert!(!error.contains("words"), "{error}");

        // Two unnamed lines are two tokens named `default`.
        let error = message(parse("first-token\nsecond-token\n"));
        assert!(
            error.contains("line 2") && error.contains("default"),
            "{error}"
        );

        let error = message(parse("# nothing\n\n"));
        assert!(
            error.contains("tokens.txt") && error.contains("no token"),
            "{error}"
        );
    }

    #[test]
    fn a_reload_swaps_the_set_and_a_bad_file_keeps_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "alice:token-of-alice\nbob:token-of-bob\n").unwrap();
        let tokens = Tokens::from_file(&path).unwrap();
        let bob = Some(&b"Bearer token-of-bob"[..]);
        assert_eq!(tokens.identify(bob).as_deref(), Some("bob"));
        let before = tokens.current();

        std::fs::write(&path, "alice:token-of-alice\n").unwrap();
        assert_eq!(tokens.reload().unwrap().names(), ["alice"]);
        assert!(tokens.identify(bob).is_none());
        // A set taken before the reload is unchanged (requests in progress).
        assert_eq!(before.identify(bob).as_deref(), Some("bob"));

        std::fs::write(&path, "alice:token-of-alice\nalice:again-alice\n").unwrap();
        let error = format!("{:#}", tokens.reload().unwrap_err());
        assert!(error.contains("previous tokens stay") && error.contains("line 2"));
        let status = tokens.status();
        assert_eq!(status.tokens, 1);
        assert_eq!(status.reloads, 1);
        assert!(status.last_reload_error.unwrap().contains("line 2"));
        assert_eq!(
            tokens.identify(Some(b"Bearer token-of-alice")).as_deref(),
            Some("alice")
        );

        std::fs::remove_file(&path).unwrap();
        assert!(tokens.reload().is_err());
        assert_eq!(tokens.current().len(), 1);
        assert!(Tokens::fixed(TokenSet::single("x", "y").unwrap())
            .reload()
            .is_err());
    }
}

//! Optional bearer-token authentication.
//!
//! The expected token is read from a file (surrounding whitespace dropped). Tokens are
//! compared through their sha256 digests with a comparison whose time does not depend on
//! where they differ, so neither the token's content nor its length leaks through
//! response times.

use std::path::Path;

use anyhow::{bail, Context as _, Result};
use sha2::{Digest, Sha256};

/// The token requests must present as `Authorization: Bearer <token>`.
#[derive(Clone)]
pub struct BearerToken {
    digest: [u8; 32],
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(..)")
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Equal slices of equal length, in time independent of their content.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

impl BearerToken {
    /// A token given as text; an empty token is an error.
    pub fn new(token: &str) -> Result<Self> {
        let token = token.trim();
        if token.is_empty() {
            bail!("the token is empty");
        }
        if token.chars().any(char::is_whitespace) {
            bail!("the token contains whitespace");
        }
        Ok(Self {
            digest: digest(token.as_bytes()),
        })
    }

    /// The token stored in `path`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read token file {}", path.display()))?;
        Self::new(&text).with_context(|| format!("token file {}", path.display()))
    }

    /// Whether an `Authorization` header value carries this token.
    pub fn accepts(&self, authorization: Option<&[u8]>) -> bool {
        let Some(value) = authorization else {
            return false;
        };
        let Some(presented) = value
            .strip_prefix(b"Bearer ")
            .or_else(|| value.strip_prefix(b"bearer "))
        else {
            return false;
        };
        constant_time_eq(&digest(presented.trim_ascii()), &self.digest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_is_accepted() {
        let token = BearerToken::new("s3cret\n").unwrap();
        assert!(token.accepts(Some(b"Bearer s3cret")));
        assert!(token.accepts(Some(b"bearer s3cret")));
        assert!(!token.accepts(None));
        assert!(!token.accepts(Some(b"Bearer s3cre")));
        assert!(!token.accepts(Some(b"Bearer s3cret2")));
        assert!(!token.accepts(Some(b"Basic s3cret")));
        assert!(!token.accepts(Some(b"s3cret")));
        assert!(BearerToken::new("  ").is_err());
        assert!(BearerToken::new("a b").is_err());
        assert!(!format!("{token:?}").contains("s3cret"));
    }

    #[test]
    fn token_files_are_named_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "abc\n").unwrap();
        assert!(BearerToken::from_file(&path)
            .unwrap()
            .accepts(Some(b"Bearer abc")));
        std::fs::write(&path, "\n").unwrap();
        let error = format!("{:#}", BearerToken::from_file(&path).unwrap_err());
        assert!(
            error.contains("token") && error.contains("empty"),
            "{error}"
        );
        let error = format!(
            "{:#}",
            BearerToken::from_file(&dir.path().join("none")).unwrap_err()
        );
        assert!(error.contains("none"), "{error}");
    }
}

//! The engine's typed errors, for callers that must tell failures apart: a request the
//! model cannot take (the service answers 422, the command line exits 2), a model that
//! failed while computing (500, exit 1), and model files that cannot be used (500 in the
//! service, which loaded them at start; exit 1). Raised as the root of an `anyhow` chain,
//! so context added on the way up keeps the kind: [`error_kind`] finds it.

/// A classified engine failure.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The request cannot be computed by this model (too long, empty, no chat template,
    /// a token outside the vocabulary).
    #[error("{0}")]
    BadRequest(String),
    /// The model files cannot be used (format, missing pieces).
    #[error("{0}")]
    Files(String),
}

/// How a failure should be reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request was at fault.
    BadRequest,
    /// The model files were at fault.
    Files,
    /// Anything else: the model or the machine failed.
    Model,
}

/// The kind of `error`: that of the first [`EngineError`] in its chain, else
/// [`ErrorKind::Model`].
pub fn error_kind(error: &anyhow::Error) -> ErrorKind {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<EngineError>())
        .map_or(ErrorKind::Model, |typed| match typed {
            EngineError::BadRequest(_) => ErrorKind::BadRequest,
            EngineError::Files(_) => ErrorKind::Files,
        })
}

/// Return early with an [`EngineError::BadRequest`].
#[macro_export]
macro_rules! bad_request {
    ($($message:tt)*) => {
        return Err($crate::engine::EngineError::BadRequest(format!($($message)*)).into())
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;

    #[test]
    fn the_kind_survives_added_context() {
        let bad: anyhow::Result<()> = Err(EngineError::BadRequest("too long".into()).into());
        let error = bad
            .context("request 3")
            .context("context `doc1`")
            .unwrap_err();
        assert_eq!(error_kind(&error), ErrorKind::BadRequest);
        assert_eq!(format!("{error:#}"), "context `doc1`: request 3: too long");
        let files = anyhow::Error::from(EngineError::Files("no weights".into()));
        assert_eq!(error_kind(&files), ErrorKind::Files);
        assert_eq!(
            error_kind(&anyhow::anyhow!("out of memory")),
            ErrorKind::Model
        );
    }
}

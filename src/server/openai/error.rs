//! Errors in the OpenAI API's shape, `{"error": {"message", "type", "param", "code"}}`,
//! with the service's own status codes: 400 malformed or invalid body (`param` names the
//! field), 401 missing or wrong token, 404 unknown model or route, 413 body over the
//! limit, 422 a request the model cannot take (`code` `context_length_exceeded` when it
//! is too long), 500 the model failed, 503 the worker has stopped.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::server::http::ApiError;

/// An error answer of the OpenAI routes.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiError {
    pub status: StatusCode,
    pub message: String,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl OpenAiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        let message = message.into();
        let code = match status {
            StatusCode::UNAUTHORIZED => Some("invalid_api_key"),
            StatusCode::PAYLOAD_TOO_LARGE => Some("request_too_large"),
            StatusCode::SERVICE_UNAVAILABLE => Some("service_unavailable"),
            StatusCode::UNPROCESSABLE_ENTITY if message.contains("context window") => {
                Some("context_length_exceeded")
            }
            _ => None,
        };
        Self {
            status,
            message,
            param: None,
            code,
        }
    }

    /// 400 about field `param`.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            param: Some(param.into()),
            ..Self::new(StatusCode::BAD_REQUEST, message)
        }
    }

    /// 404: the request names a model this service does not serve.
    pub fn unknown_model(asked: &str, served: &str) -> Self {
        Self {
            param: Some("model".to_string()),
            code: Some("model_not_found"),
            ..Self::new(
                StatusCode::NOT_FOUND,
                format!("The model `{asked}` does not exist; this service serves `{served}`."),
            )
        }
    }

    /// The error `type` OpenAI gives for this status.
    fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }
}

impl From<ApiError> for OpenAiError {
    fn from(error: ApiError) -> Self {
        let (status, message) = error.parts();
        Self::new(status, message)
    }
}

impl IntoResponse for OpenAiError {
    fn into_response(self) -> Response {
        let body = json!({
            "error": {
                "message": self.message,
                "type": self.kind(),
                "param": self.param,
                "code": self.code,
            }
        });
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

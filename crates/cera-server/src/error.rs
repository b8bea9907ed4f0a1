//! Errors: the crate's startup errors, and request errors answered as OpenAI-shaped JSON
//! (`{"error": {"message", "type", "param", "code"}}`) with the matching status.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Errors starting or running the server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    #[error("loading the model {path}: {source}")]
    Load {
        path: String,
        #[source]
        source: cera::Error,
    },
    #[error("listening on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("bad configuration: {0}")]
    Config(String),
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
}

/// A request that failed, answered with `status` and an OpenAI error body.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub code: Option<&'static str>,
    pub param: Option<String>,
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            code: None,
            param: None,
            retry_after: None,
        }
    }

    pub fn param(mut self, p: &str) -> ApiError {
        self.param = Some(p.to_owned());
        self
    }

    pub fn code(mut self, c: &'static str) -> ApiError {
        self.code = Some(c);
        self
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            kind: "not_found_error",
            ..ApiError::bad_request(message)
        }
    }

    pub fn unauthorized() -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            kind: "authentication_error",
            code: Some("invalid_api_key"),
            ..ApiError::bad_request("a valid API key is needed: Authorization: Bearer KEY")
        }
    }

    pub fn unavailable(message: impl Into<String>, retry_after: u32) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "server_error",
            code: Some("unavailable"),
            retry_after: Some(retry_after),
            ..ApiError::bad_request(message)
        }
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            ..ApiError::bad_request(message)
        }
    }

    pub fn timeout(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::GATEWAY_TIMEOUT,
            kind: "server_error",
            code: Some("timeout"),
            ..ApiError::bad_request(message)
        }
    }

    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        r
    }
}

/// A core error met while preparing a request: bad input is the client's (400).
impl From<cera::Error> for ApiError {
    fn from(e: cera::Error) -> ApiError {
        match e {
            cera::Error::ContextOverflow { .. }
            | cera::Error::TokenOutOfRange { .. }
            | cera::Error::Grammar(_)
            | cera::Error::JsonSchema(_)
            | cera::Error::Tools(_)
            | cera::Error::ChatTemplate { .. }
            | cera::Error::ChatTemplateRaised { .. } => ApiError::bad_request(e.to_string()),
            other => ApiError::internal(other.to_string()),
        }
    }
}

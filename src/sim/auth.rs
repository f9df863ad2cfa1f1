//! Who may call the simulator: a bearer token (the configured key, or any non-empty one), or
//! none at all under open access; otherwise the API's own 401s.

use axum::http::{HeaderMap, header};
use axum::response::Response;

use super::errors::error_response;
use super::state::SimState;

/// The bearer token, when it is acceptable.
#[allow(clippy::result_large_err)] // a handler helper: the error is the response to send
pub(crate) fn authorize(state: &SimState, headers: &HeaderMap) -> Result<String, Response> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty());
    match (token, &state.cfg.api_key) {
        (None, _) if state.cfg.open_access => Ok(String::new()),
        (None, _) => Err(error_response(401, "No auth credentials found", None)),
        (Some(t), Some(k)) if t != k => Err(error_response(401, "User not found.", None)),
        (Some(t), _) => Ok(t.to_string()),
    }
}

//! Bearer-token authentication: every call carries `Authorization: Bearer
//! TOKEN`, compared in constant time.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::problem::{ApiError, Problem};

/// The secret a caller must present. Kept as its SHA-256 only: the
/// comparison then takes the same time whatever the length or the first
/// differing byte of what a caller sent, and the secret itself is not kept
/// in memory longer than it takes to hash it.
#[derive(Clone)]
pub struct Token {
    digest: [u8; 32],
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

impl Token {
    /// A token from its text. Surrounding whitespace (a file's trailing
    /// newline) is not part of it; an empty token is refused, as is one
    /// that could not travel in a header.
    pub fn new(text: &str) -> Result<Token, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("the token is empty".into());
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(
                "the token must be visible ASCII without spaces (it travels in an HTTP header)"
                    .into(),
            );
        }
        Ok(Token {
            digest: Sha256::digest(text.as_bytes()).into(),
        })
    }

    /// Whether `given` is the token, in constant time.
    pub(crate) fn matches(&self, given: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(given).into();
        self.digest.ct_eq(&digest).into()
    }
}

/// The middleware: a call without the token is refused with 401 before its
/// body is read.
pub(crate) async fn require(
    State(token): State<Arc<Token>>,
    request: Request,
    next: Next,
) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    let detail = match given {
        None => "the request has no Authorization header: send `Authorization: Bearer TOKEN`",
        Some(v) => match strip_bearer(v) {
            None => "the Authorization header is not `Bearer TOKEN`",
            Some(t) if token.matches(t) => return next.run(request).await,
            Some(_) => "the bearer token is not this server's token",
        },
    };
    let mut response = ApiError(Problem::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "The request needs this server's bearer token",
        detail,
    ))
    .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"idem\""),
    );
    response
}

/// The token after `Bearer ` (the scheme is case-insensitive).
pub(crate) fn strip_bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| rest.trim_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_matches_only_itself() {
        let token = Token::new("s3cret\n").unwrap();
        assert!(token.matches(b"s3cret"));
        assert!(!token.matches(b"s3cret2"));
        assert!(!token.matches(b""));
        assert!(Token::new("  \n").is_err());
        assert!(Token::new("has space").is_err());
    }

    #[test]
    fn the_scheme_is_bearer_in_any_case() {
        assert_eq!(strip_bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(strip_bearer(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(strip_bearer(b"Basic abc"), None);
        assert_eq!(strip_bearer(b"Bear"), None);
    }
}

//! The body of every response the layer sends.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every response the layer sends: the handler's own, passed
/// through or buffered, or one the layer wrote (a replay, a problem).
pub type ResponseBody = UnsyncBoxBody<Bytes, BoxError>;

/// A finished body of `bytes`.
pub(crate) fn full(bytes: Bytes) -> ResponseBody {
    Full::new(bytes)
        .map_err(|never: Infallible| match never {})
        .boxed_unsync()
}

//! What the layer was configured with, shared by every clone of the
//! service.

use std::time::Duration;

use http::{HeaderName, Method, StatusCode};
use idem::engine::Engine;
use idem::store::Ending;

/// Whose request it is: the operation's tenant, which scopes the key.
#[derive(Debug, Clone)]
pub(crate) enum Tenant {
    /// Every request belongs to this tenant.
    Fixed(String),
    /// The tenant is this request header's value (a request without it is
    /// refused with 400).
    Header(HeaderName),
}

/// Everything a request needs to know, shared by every clone of the service.
#[derive(Clone)]
pub(crate) struct Config {
    pub engine: Engine,
    pub tenant: Tenant,
    pub key_header: HeaderName,
    pub methods: Vec<Method>,
    pub body_limit: usize,
    pub max_stored_bytes: usize,
    pub replayed_headers: Vec<HeaderName>,
    pub ending: fn(StatusCode) -> Ending,
    pub kind: String,
    /// The `Retry-After` of a request in flight when the policy gives no
    /// shorter hint.
    pub in_flight_retry_after: Duration,
}

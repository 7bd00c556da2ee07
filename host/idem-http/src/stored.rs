//! A response as the store keeps it: the status in the outcome's status, the
//! replayed headers and the body in its bytes.
//!
//! The bytes are `idem-http/1\n`, one `name: value\n` line per header, an
//! empty line, then the body. A header value never holds a line break (the
//! `http` crate refuses one), so the lines cannot be forged by a value.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, header};
use idem::store::Outcome;

use crate::problem::{self, Problem};
use crate::response_body::{ResponseBody, full};

/// The headers stored and replayed unless configured otherwise: those
/// describing the body or the resource the request created. Never cookies,
/// caching or anything per connection.
pub const DEFAULT_REPLAYED_HEADERS: &[&str] = &[
    "content-type",
    "content-language",
    "content-location",
    "location",
];

const MAGIC: &[u8] = b"idem-http/1\n";

/// Encodes the headers named in `names` (in that order, each value of a
/// repeated header) and `body`.
pub(crate) fn encode(headers: &HeaderMap, names: &[HeaderName], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + 64 + body.len());
    out.extend_from_slice(MAGIC);
    for name in names {
        for value in headers.get_all(name) {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.push(b'\n');
        }
    }
    out.push(b'\n');
    out.extend_from_slice(body);
    out
}

/// A response as the layer stores it, for a record the service settles
/// itself ([`Resolution::Completed`](idem::store::Resolution::Completed),
/// through [`resolve`](idem::forensics::review::resolve)): every later
/// duplicate is replayed `status`, `headers` and `body`, with
/// `Idempotent-Replayed: true`, as if the handler had answered so. Every
/// header given is stored: pass only those a replay should carry (the
/// layer's own responses keep [`DEFAULT_REPLAYED_HEADERS`]).
///
/// ```
/// use http::{HeaderMap, HeaderValue, StatusCode, header};
///
/// let mut headers = HeaderMap::new();
/// headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
/// let outcome = idem_http::stored_outcome(StatusCode::CREATED, &headers, br#"{"charge":"ch_1"}"#);
/// assert_eq!(outcome.status, 201);
/// assert!(outcome.body.ends_with(br#"{"charge":"ch_1"}"#));
/// ```
pub fn stored_outcome(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Outcome {
    let names: Vec<HeaderName> = headers.keys().cloned().collect();
    Outcome::new(i32::from(status.as_u16()), encode(headers, &names, body))
}

/// What is stored instead of a response too large to keep (its body was
/// `size` bytes, past `limit`): its status stays, a problem body says why
/// the rest is missing.
pub(crate) fn not_kept(status: StatusCode, size: usize, limit: usize) -> Vec<u8> {
    let problem = Problem::new(
        status,
        "response-not-kept",
        "The original response was too large to keep for replay",
        format!(
            "the original response, with a body of {size} bytes, was more than the {limit} bytes kept for replay; its status is this response's status"
        ),
    );
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(problem::CONTENT_TYPE),
    );
    encode(&headers, &[header::CONTENT_TYPE], &problem.to_bytes())
}

/// A stored response, replayed: its status, headers and body, with
/// `Idempotent-Replayed: true`.
pub(crate) fn replayed(
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
) -> Response<ResponseBody> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
        .headers_mut()
        .insert(crate::IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    response
}

/// Why stored bytes are not a response this layer stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotAResponse(pub &'static str);

/// Decodes what [`encode`] wrote.
pub(crate) fn decode(bytes: &[u8]) -> Result<(HeaderMap, Bytes), NotAResponse> {
    let mut rest = bytes.strip_prefix(MAGIC).ok_or(NotAResponse(
        "it does not start with the idem-http/1 marker",
    ))?;
    let mut headers = HeaderMap::new();
    loop {
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or(NotAResponse("its header lines do not end"))?;
        let (line, after) = (&rest[..end], &rest[end + 1..]);
        rest = after;
        if line.is_empty() {
            return Ok((headers, Bytes::copy_from_slice(rest)));
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or(NotAResponse("a header line has no colon"))?;
        let name = HeaderName::from_bytes(&line[..colon])
            .map_err(|_| NotAResponse("a header name is not valid"))?;
        let value = line[colon + 1..]
            .strip_prefix(b" ")
            .unwrap_or(&line[colon + 1..]);
        let value = HeaderValue::from_bytes(value)
            .map_err(|_| NotAResponse("a header value is not valid"))?;
        headers.append(name, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_named_headers_only() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.append("location", HeaderValue::from_static("/charges/1"));
        headers.append("set-cookie", HeaderValue::from_static("secret=1"));
        let names = [
            HeaderName::from_static("content-type"),
            HeaderName::from_static("location"),
        ];
        let body = b"{\"id\":1}\n\nwith blank lines";
        let (decoded, decoded_body) = decode(&encode(&headers, &names, body)).unwrap();
        assert_eq!(decoded.len(), 2);
        assert_eq!(decoded["content-type"], "application/json");
        assert_eq!(decoded["location"], "/charges/1");
        assert!(decoded.get("set-cookie").is_none());
        assert_eq!(&decoded_body[..], body);
    }

    #[test]
    fn refuses_bytes_it_did_not_write() {
        assert_eq!(
            decode(b"receipt 1234"),
            Err(NotAResponse(
                "it does not start with the idem-http/1 marker"
            ))
        );
        assert!(decode(b"idem-http/1\ncontent-type: x").is_err());
        assert!(decode(b"idem-http/1\nno colon\n\n").is_err());
    }
}

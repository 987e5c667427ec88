//! The rules a URL question must meet.

use crate::CannotAsk;

/// The longest URL asked.
pub const MAX_URL_LEN: usize = 4096;

/// Checks a URL question: HTTPS, or HTTP on `localhost`, `127.0.0.1` or `[::1]`; a
/// host; no user name or password; at most [`MAX_URL_LEN`] characters.
pub fn check_url(url: &str) -> Result<(), CannotAsk> {
    let fail = |why: String| Err(CannotAsk::at("/url", why));
    if url.len() > MAX_URL_LEN {
        return fail(format!("the URL is {} characters, more than {MAX_URL_LEN}", url.len()));
    }
    let Ok(uri) = url.parse::<http::Uri>() else {
        return fail(format!("{url:?} is not a valid URL"));
    };
    let Some(authority) = uri.authority() else {
        return fail(format!("the URL {url:?} names no host"));
    };
    if authority.as_str().contains('@') {
        return fail("the URL must not carry a user name or password".to_owned());
    }
    let host = authority.host();
    if host.is_empty() {
        return fail(format!("the URL {url:?} names no host"));
    }
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if matches!(host, "localhost" | "127.0.0.1" | "[::1]") => Ok(()),
        Some("http") => fail("an http URL must be on localhost, 127.0.0.1 or [::1]; use https".to_owned()),
        Some(other) => fail(format!("the scheme {other} is not allowed; use https")),
        None => fail(format!("the URL {url:?} has no scheme")),
    }
}

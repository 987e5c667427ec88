//! POSTs with a timeout per attempt and retries with backoff on `429`, `5xx` and
//! failed connections, honouring `Retry-After` (in seconds, at most 30).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;

use crate::ModelError;

/// The first pause between attempts; doubled after each.
const FIRST_PAUSE: Duration = Duration::from_millis(250);
/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub(crate) struct Http(Client<hitl_tls::Connector, Full<Bytes>>);

impl Http {
    pub(crate) fn new() -> Self {
        Self(Client::builder(hyper_util::rt::TokioExecutor::new()).build(hitl_tls::system()))
    }

    /// The body of a `2xx` answer to a JSON POST of `body` to `url`.
    pub(crate) async fn post(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: String,
        timeout: Duration,
        retries: u32,
    ) -> Result<Bytes, ModelError> {
        let body = Bytes::from(body);
        let mut pause = FIRST_PAUSE;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut request = http::Request::post(url)
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(http::header::USER_AGENT, "hitl");
            for (name, value) in headers {
                request = request.header(*name, value);
            }
            let request = request
                .body(Full::new(body.clone()))
                .map_err(|e| ModelError::Unreachable { url: url.to_owned(), reason: e.to_string() })?;
            let sent = tokio::time::timeout(timeout, async {
                let response = self.0.request(request).await?;
                let status = response.status();
                let retry_after = response
                    .headers()
                    .get(http::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                let bytes = response.into_body().collect().await?.to_bytes();
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, retry_after, bytes))
            })
            .await;
            let (error, wait) = match sent {
                Ok(Ok((status, _, bytes))) if status.is_success() => return Ok(bytes),
                Ok(Ok((status, retry_after, bytes))) => {
                    let shown: String = String::from_utf8_lossy(&bytes).chars().take(300).collect();
                    let error = ModelError::Status { url: url.to_owned(), status: status.as_u16(), body: shown };
                    let again = status == http::StatusCode::TOO_MANY_REQUESTS || status.is_server_error();
                    if !again {
                        return Err(error);
                    }
                    (error, retry_after.map(|r| r.min(MAX_RETRY_AFTER)))
                }
                Ok(Err(e)) => (ModelError::Unreachable { url: url.to_owned(), reason: e.to_string() }, None),
                Err(_) => (ModelError::Timeout { url: url.to_owned(), seconds: timeout.as_secs() }, None),
            };
            if attempt > retries {
                return Err(error);
            }
            tracing::warn!(%url, attempt, %error, "the model failed; trying again");
            tokio::time::sleep(wait.unwrap_or(pause)).await;
            pause *= 2;
        }
    }
}

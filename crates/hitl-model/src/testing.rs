//! A scripted model server for tests (feature `test-support`): it answers each request
//! with the next scripted answer, speaking whatever wire format the script is written
//! in, and keeps what it received, so a test checks the request's shape.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// One scripted answer: status, body, and a `Retry-After` header; `None` status holds
/// the request without answering.
pub type Scripted = (Option<u16>, Value, Option<&'static str>);

/// What the server received, request by request.
pub type Received = Arc<Mutex<Vec<Request>>>;

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Request {
    /// Its path (`/v1/chat/completions`, `/v1/messages`).
    pub path: String,
    /// Its headers.
    pub headers: ::http::HeaderMap,
    /// Its body, as JSON (`Null` when it is not JSON).
    pub body: Value,
}

/// A server answering each request with the next of `script`.
pub async fn server(script: Vec<Scripted>) -> (String, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let received: Received = Arc::default();
    let script = Arc::new(Mutex::new(script.into_iter()));
    let kept = received.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let (kept, script) = (kept.clone(), script.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: ::http::Request<hyper::body::Incoming>| {
                    let (kept, script) = (kept.clone(), script.clone());
                    async move {
                        let (parts, body) = request.into_parts();
                        let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        kept.lock().unwrap().push(Request {
                            path: parts.uri.path().to_owned(),
                            headers: parts.headers,
                            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                        });
                        let next = script.lock().unwrap().next();
                        let (status, answer, retry_after) = next.expect("the script has an answer for each request");
                        let Some(status) = status else {
                            std::future::pending::<()>().await;
                            unreachable!()
                        };
                        let mut response = ::http::Response::builder().status(status);
                        if let Some(after) = retry_after {
                            response = response.header("retry-after", after);
                        }
                        Ok::<_, std::convert::Infallible>(
                            response.body(Full::new(Bytes::from(answer.to_string()))).unwrap(),
                        )
                    }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    (base, received)
}

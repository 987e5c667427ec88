//! Serving one request: validate it, dispatch it, and answer with JSON or a stream.

use std::sync::Arc;

use bytes::Bytes;
use hitl_protocol::version::Era;
use hitl_protocol::{ClientRequest, Response};
use http::{HeaderValue, StatusCode};

use crate::validate::{self, Valid};
use crate::{McpBody, Shared, error_response, json_response, sse};

impl Shared {
    pub(crate) async fn handle(self: Arc<Self>, request: http::Request<Bytes>) -> http::Response<McpBody> {
        let Valid { id, request, caller, stream } =
            match validate::validate(&self.tools.snapshot(), self.options.access.as_ref(), &request) {
                Ok(valid) => valid,
                Err(refused) => return *refused,
            };
        let era = caller.era;
        if let Some(token) = stream {
            return sse::respond(token, move |progress, cancel| async move {
                let result = self.dispatch(request, caller, Some(progress), Some(cancel)).await;
                self.message(id, era, result)
            });
        }
        let initialize = matches!(request, ClientRequest::Initialize(_));
        let mut response = match self.message(id, era, self.dispatch(request, caller, None, None).await) {
            Response::Error { id, error } => return error_response(era, id, error),
            ok => json_response(StatusCode::OK, &ok),
        };
        if initialize && era == Era::Legacy {
            // Legacy clients expect a session: hitl keeps no per-session state, so the id
            // only names the client's session and every request is served without it.
            let session = uuid::Uuid::new_v4().simple().to_string();
            if let Ok(value) = HeaderValue::from_str(&session) {
                response.headers_mut().insert("mcp-session-id", value);
            }
        }
        response
    }
}

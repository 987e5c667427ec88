//! Dispatch of a valid request: `server/discover`, `tools/*`, `prompts/*` (agents as
//! prompts, then a [`crate::Passthrough`]'s), `completion/complete`, `resources/*`
//! (a passthrough's, else empty), and the legacy `initialize`/`ping`/`logging/setLevel`;
//! typed results (`ServerResult`) stamped for their era.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use futures_util::FutureExt;
use futures_util::future::Either;
use hitl_graph::TaskSupport;
use hitl_interrupt::{Agent, Binding, Reply, Resumable, ToolCall};
use hitl_protocol::version::{self, Era};
use hitl_protocol::{
    CacheScope, CallToolParams, CallToolResult, ClientRequest, ContentBlock, DiscoverResult, EmptyResult, ErrorObject,
    GetPromptResult, InitializeResult, ListPromptsResult, ListToolsResult, Prompt, PromptArgument, PromptMessage,
    RequestId, Response, ResultType, Role, ServerCapabilities, ServerResult, Tool,
};
use serde_json::{Map, Value, json};

use crate::validate::{self, Caller};
use crate::{Shared, store_unavailable, to_json};

impl Shared {
    /// The response message of a dispatched request.
    /// The result stays typed: it is serialized once, as the response is written.
    pub(crate) fn message(&self, id: RequestId, era: Era, result: Result<ServerResult, ErrorObject>) -> Response {
        match result {
            Ok(mut result) => {
                result.stamp(era == Era::Modern, &self.server_info);
                Response::Typed { id, result: Box::new(result) }
            }
            Err(error) => Response::Error { id: Some(id), error },
        }
    }

    /// Serves a typed request. A `tools/call`, the request every round is, has a future
    /// of its own; the others' are boxed, so the call's future (moved into a box per
    /// request) is not the size of the largest of theirs.
    pub(crate) fn dispatch(
        self: &Arc<Self>,
        request: ClientRequest,
        caller: Caller,
        progress: Option<hitl_graph::ProgressFn>,
        cancel: Option<Arc<AtomicBool>>,
    ) -> impl Future<Output = Result<ServerResult, ErrorObject>> + Send + use<> {
        match request {
            ClientRequest::CallTool(params) => Either::Left(self.call_tool(params, caller, progress, cancel)),
            request => {
                let this = Arc::clone(self);
                Either::Right(Box::pin(async move { this.dispatch_other(request, caller, progress, cancel).await }))
            }
        }
    }

    /// A `tools/call`. All that comes before the run is worked out here, before its
    /// future is made: the future keeps the call and what its reply needs, nothing else.
    fn call_tool(
        self: &Arc<Self>,
        params: CallToolParams,
        caller: Caller,
        progress: Option<hitl_graph::ProgressFn>,
        cancel: Option<Arc<AtomicBool>>,
    ) -> impl Future<Output = Result<ServerResult, ErrorObject>> + Send + use<> {
        let era = caller.era;
        // A client that follows tasks; who a task is made for (cloned only then).
        let task = era == Era::Modern && crate::tasks::declared(&caller.capabilities);
        let task_principal = if task { caller.principal.clone() } else { None };
        let unpushed = self.unpushed(era, caller.session.as_deref());
        let tools = self.tools.snapshot();
        let may =
            validate::allowed(self.options.access.as_ref(), &params.name, caller.principal.as_deref(), &caller.groups);
        let prepared = match tools.get_full(&params.name).filter(|_| may) {
            None => Err(ErrorObject::invalid_params(format!("Unknown tool: {}", params.name))),
            Some((_, _, agent)) if agent.tasks == TaskSupport::Required && !task => Err(crate::tasks::undeclared()),
            Some((index, _, agent)) => {
                // Only a new call becomes a task (a retry continues a round), and only of
                // a tool that may run as one.
                let task = task && params.request_state.is_none() && agent.tasks != TaskSupport::Forbidden;
                let answers = params.input_responses.is_some();
                let sent = (params.arguments, params.input_responses, params.request_state, params.context);
                let call = tool_call(caller, self.resumable(era), Binding::Tool, sent, progress, cancel);
                Ok((index, task, answers, call))
            }
        };
        let this = Arc::clone(self);
        async move {
            let (index, task, answers, call) = prepared?;
            let agent = &tools[index];
            if task && !answers {
                return Box::pin(this.call_as_task(agent, call)).await;
            }
            let reply = if task {
                // Boxed: only clients that follow tasks take it.
                this.reply_of(agent, Box::pin(this.engine.tasks().call(agent, call)).await)
            } else {
                this.run(agent, call).await
            };
            match reply {
                Reply::Complete(mut r) => {
                    told_why(&mut r, unpushed.as_deref());
                    Ok(ServerResult::CallTool(r))
                }
                // A client that follows tasks gets the paused call as one.
                Reply::Paused { thread_id, .. } if task => {
                    let created = Box::pin(this.created(&thread_id, task_principal.as_deref())).await?;
                    Ok(ServerResult::CreateTask(created))
                }
                Reply::Paused { round, .. } => Ok(ServerResult::InputRequired(round)),
                Reply::Refused(error) => Err(error),
            }
        }
    }

    /// Serves a typed request other than `tools/call`.
    async fn dispatch_other(
        &self,
        request: ClientRequest,
        caller: Caller,
        progress: Option<hitl_graph::ProgressFn>,
        cancel: Option<Arc<AtomicBool>>,
    ) -> Result<ServerResult, ErrorObject> {
        let era = caller.era;
        // The Tasks extension's methods need the whole caller; served before it is split.
        // The task paths are boxed: the future of every request stays small.
        let request = match (request, era) {
            (ClientRequest::GetTask(params), Era::Modern) => return Box::pin(self.get_task(params, &caller)).await,
            (ClientRequest::UpdateTask(params), Era::Modern) => {
                return Box::pin(self.update_task(params, &caller)).await;
            }
            (ClientRequest::CancelTask(params), Era::Modern) => {
                return Box::pin(self.cancel_task(params, &caller)).await;
            }
            (request, _) => request,
        };
        // Who asks, for resources and prompts served from elsewhere.
        let passed = matches!(
            request,
            ClientRequest::ListResources(_)
                | ClientRequest::ListResourceTemplates(_)
                | ClientRequest::ReadResource(_)
                | ClientRequest::ListPrompts(_)
                | ClientRequest::GetPrompt(_)
                | ClientRequest::Subscribe(_)
                | ClientRequest::Unsubscribe(_)
        );
        let asker = self.options.passthrough.as_ref().filter(|_| passed).map(|_| asker(&caller));
        let session = caller.session.clone();
        let access = self.options.access.as_ref();
        let groups = caller.groups.clone();
        let principal = caller.principal.clone();
        let may = move |name: &str| validate::allowed(access, name, principal.as_deref(), &groups);
        match (request, era) {
            (ClientRequest::Discover(_), Era::Modern) => self.discover(),
            (ClientRequest::ListTools(_), _) => self.list_tools(era, &may),
            (ClientRequest::ListPrompts(_), _) => self.list_prompts(era, &may, asker.as_ref()),
            (ClientRequest::Complete(_), _) => {
                Ok(other(json!({"completion": {"values": [], "total": 0, "hasMore": false}})))
            }
            // Without a passthrough hitl serves no resources: the lists are empty (and
            // cacheable), reads fail.
            (ClientRequest::ListResources(_), _) => {
                let listed = self.passed(asker.as_ref(), |p, a| p.resources(a));
                Ok(self.list("resources", listed, era))
            }
            (ClientRequest::ListResourceTemplates(_), _) => {
                let listed = self.passed(asker.as_ref(), |p, a| p.resource_templates(a));
                Ok(self.list("resourceTemplates", listed, era))
            }
            (ClientRequest::ReadResource(params), _) => match (&self.options.passthrough, &asker) {
                (Some(passthrough), Some(asker)) => {
                    let mut result = passthrough.0.read_resource(&params.uri, asker).await?;
                    if era == Era::Modern
                        && let Value::Object(map) = &mut result
                    {
                        self.cacheable(map);
                    }
                    Ok(other(result))
                }
                _ => Err(ErrorObject::invalid_params(format!("Resource not found: {}", params.uri))
                    .with_data(json!({ "uri": params.uri }))),
            },
            (ClientRequest::GetPrompt(params), _) => {
                let Some(agent) = self.prompts.get(&params.name).filter(|_| may(&params.name)) else {
                    if let (Some(passthrough), Some(asker)) = (&self.options.passthrough, &asker) {
                        let name = params.name.clone();
                        let mut sent = Map::new();
                        if let Some(arguments) = params.arguments {
                            sent.insert("arguments".into(), Value::Object(arguments));
                        }
                        if let Some(responses) = params.input_responses {
                            sent.insert("inputResponses".into(), to_json(&responses)?);
                        }
                        if let Some(state) = params.request_state {
                            sent.insert("requestState".into(), Value::String(state));
                        }
                        if let Some(answer) = passthrough.0.get_prompt(&name, sent, asker).await {
                            return answer.map(other);
                        }
                    }
                    return Err(ErrorObject::invalid_params(format!("Unknown prompt: {}", params.name)));
                };
                let sent = (params.arguments, params.input_responses, params.request_state, None);
                let call = tool_call(caller, self.resumable(era), Binding::Prompt, sent, progress, cancel);
                match self.run(agent, call).await {
                    Reply::Paused { round, .. } => Ok(ServerResult::InputRequired(round)),
                    Reply::Complete(r) => Ok(ServerResult::GetPrompt(prompt_result(agent, r)?)),
                    Reply::Refused(error) => Err(error),
                }
            }
            (ClientRequest::Subscribe(params), Era::Legacy) => {
                let (passthrough, client) = self.subscriber(session.as_deref(), "resources/subscribe")?;
                let asker = asker.unwrap_or_default();
                passthrough.subscribe(&client, &params.uri, &asker).await?;
                self.options.notifier.sessions.subscribed(&client);
                self.forget_expired();
                Ok(ServerResult::Empty(EmptyResult::default()))
            }
            (ClientRequest::Unsubscribe(params), Era::Legacy) => {
                let (passthrough, client) = self.subscriber(session.as_deref(), "resources/unsubscribe")?;
                passthrough.unsubscribe(&client, &params.uri).await;
                Ok(ServerResult::Empty(EmptyResult::default()))
            }
            (ClientRequest::Initialize(params), Era::Legacy) => {
                let result = InitializeResult {
                    protocol_version: version::negotiate_legacy(&params.protocol_version).to_owned(),
                    capabilities: self.capabilities(),
                    server_info: self.options.server_info.clone(),
                    instructions: self.options.instructions.clone(),
                };
                Ok(ServerResult::Initialize(Box::new(result)))
            }
            (ClientRequest::Ping(_) | ClientRequest::SetLevel(_), Era::Legacy) => {
                Ok(ServerResult::Empty(EmptyResult::default()))
            }
            (other, _) => Err(ErrorObject::method_not_found(other.method())),
        }
    }

    /// Whether a call of a client of `era` can be resumed: a 2025-era client can't
    /// answer a round (push asks its questions otherwise), nor can any client of a
    /// deployment that keeps no threads.
    pub(crate) fn resumable(&self, era: Era) -> Resumable {
        match era {
            Era::Legacy => Resumable::LEGACY,
            Era::Modern if !self.options.threads => Resumable::NO_THREADS,
            Era::Modern => Resumable::Yes,
        }
    }

    /// Serves `call` of `agent`. A client that can't answer rounds and sends a
    /// `requestState` is told the call is paused; the thread is left to a client that can.
    /// The engine's future itself, mapped: no future around it keeps the call again.
    pub(crate) fn run<'a>(&'a self, agent: &'a Agent, call: ToolCall) -> impl Future<Output = Reply> + Send + 'a {
        let answered = if call.resumable == Resumable::LEGACY && call.request_state.is_some() {
            Either::Left(Box::pin(async move { self.engine.peek(agent, &call).await }))
        } else {
            Either::Right(self.engine.call(agent, call))
        };
        answered.map(move |answered| self.reply_of(agent, answered))
    }

    /// The engine's reply, a store failure refused as unavailable (the detail goes to
    /// the log).
    fn reply_of(&self, agent: &Agent, answered: Result<Reply, hitl_interrupt::EngineError>) -> Reply {
        answered.unwrap_or_else(|e| {
            tracing::error!(error = %e, agent = %agent.name, "call failed");
            Reply::Refused(store_unavailable())
        })
    }

    /// The passthrough that takes subscriptions, and the client a 2025-era session's
    /// `method` subscribes for (`session:<id>`): `-32601` when nothing offers
    /// subscriptions (as before there were any), `-32600` without a session.
    fn subscriber(
        &self,
        session: Option<&str>,
        method: &str,
    ) -> Result<(Arc<dyn crate::Passthrough>, String), ErrorObject> {
        let Some(passthrough) = self.options.passthrough.as_ref().filter(|p| p.0.subscribable()) else {
            return Err(ErrorObject::method_not_found(method));
        };
        let Some(session) = session else {
            return Err(ErrorObject::invalid_request(format!(
                "Invalid request: {method} needs the Mcp-Session-Id that initialize gave"
            )));
        };
        Ok((passthrough.0.clone(), session_client(session)))
    }

    /// Ends the subscriptions of 2025-era sessions whose GET streams are gone (past
    /// their grace), in the background.
    pub(crate) fn forget_expired(&self) {
        let expired = self.options.notifier.sessions.expired(std::time::Instant::now());
        let (Some(passthrough), false) = (&self.options.passthrough, expired.is_empty()) else { return };
        let passthrough = passthrough.0.clone();
        tokio::spawn(async move {
            for client in expired {
                tracing::debug!(%client, "a 2025-era session's subscriptions end: no GET stream for a minute");
                passthrough.forget(&client).await;
            }
        });
    }

    /// For a 2025-era client that declared elicitation in its session while this server
    /// does not push questions (`legacy_elicitation` off): why its paused calls fail and
    /// what to do, since the client does elicit.
    fn unpushed(&self, era: Era, session: Option<&str>) -> Option<String> {
        if era != Era::Legacy || self.options.legacy_elicitation {
            return None;
        }
        let session = crate::session::read(self.engine.secret(), session?)?;
        let elicits = session.capabilities.elicits_form() || session.capabilities.elicits_url();
        elicits.then(|| {
            format!(
                "This server does not push questions to clients of protocol version {}: call it with protocol version {} to answer them.",
                session.version,
                version::MODERN
            )
        })
    }

    fn capabilities(&self) -> ServerCapabilities {
        let mut caps = ServerCapabilities { tools: Some(Map::new()), ..ServerCapabilities::default() };
        if !self.prompts.is_empty() {
            caps.prompts = Some(Map::new());
        }
        if self.options.passthrough.is_some() {
            // What is served from elsewhere may change: clients hear of it on their
            // notification streams.
            let changes = Map::from_iter([("listChanged".to_owned(), Value::Bool(true))]);
            caps.tools = Some(changes.clone());
            caps.prompts = Some(changes.clone());
            let mut resources = changes;
            if self.options.passthrough.as_ref().is_some_and(|p| p.0.subscribable()) {
                resources.insert("subscribe".into(), Value::Bool(true));
            }
            caps.resources = Some(resources);
        }
        caps.other.insert("completions".into(), json!({}));
        caps.extensions = Some(Map::from_iter([(crate::tasks::TASKS.to_owned(), json!({}))]));
        caps
    }

    fn discover(&self) -> Result<ServerResult, ErrorObject> {
        let result = DiscoverResult {
            result_type: ResultType::Complete,
            supported_versions: version::SUPPORTED.iter().map(|v| (*v).to_owned()).collect(),
            capabilities: self.capabilities(),
            instructions: self.options.instructions.clone(),
            ttl_ms: self.options.list_ttl_ms,
            cache_scope: CacheScope::Public,
            meta: None,
        };
        Ok(ServerResult::Discover(Box::new(result)))
    }

    fn list_tools(&self, era: Era, may: &dyn Fn(&str) -> bool) -> Result<ServerResult, ErrorObject> {
        let (tools, listings) = self.tools.listed();
        let tools = tools
            .values()
            .filter(|a| may(&a.name))
            .map(|a| {
                // A gateway's upstream tool keeps its title, annotations, output schema…
                let mut other = listings.get(&a.name).cloned().unwrap_or_default();
                let title = other.remove("title").and_then(|t| t.as_str().map(str::to_owned));
                let output_schema = other.remove("outputSchema");
                Tool {
                    name: a.name.clone(),
                    title,
                    description: Some(a.description.clone()),
                    input_schema: a.input_schema.clone(),
                    output_schema,
                    other,
                }
            })
            .collect();
        let modern = era == Era::Modern;
        let result = ListToolsResult {
            result_type: modern.then_some(ResultType::Complete),
            tools,
            next_cursor: None,
            ttl_ms: modern.then_some(self.options.list_ttl_ms),
            cache_scope: modern.then(|| self.list_scope()),
            meta: None,
        };
        Ok(ServerResult::ListTools(result))
    }

    /// The cache scope of the tool and prompt lists: private when they depend on who asks.
    fn list_scope(&self) -> CacheScope {
        if self.options.private_lists || self.options.access.as_ref().is_some_and(crate::Access::personal) {
            CacheScope::Private
        } else {
            CacheScope::Public
        }
    }

    /// What the passthrough lists for `asker` (nothing without one).
    fn passed(
        &self,
        asker: Option<&crate::Asker>,
        list: impl Fn(&dyn crate::Passthrough, &crate::Asker) -> Vec<Map<String, Value>>,
    ) -> Vec<Map<String, Value>> {
        match (&self.options.passthrough, asker) {
            (Some(passthrough), Some(asker)) => list(passthrough.0.as_ref(), asker),
            _ => Vec::new(),
        }
    }

    /// A list result (`{key: items}`), cacheable on the modern wire: public when
    /// empty and nothing is passed through (as it always was), else as tools are.
    fn list(&self, key: &str, items: Vec<Map<String, Value>>, era: Era) -> ServerResult {
        let items: Vec<Value> = items.into_iter().map(Value::Object).collect();
        let mut result = Map::from_iter([(key.to_owned(), Value::Array(items))]);
        if era == Era::Modern {
            self.cacheable(&mut result);
        }
        ServerResult::Other(Value::Object(result))
    }

    /// Adds the caching hints of a modern list or read result: its own `ttlMs` (else
    /// the lists'), and `cacheScope` private when the result says so or the lists
    /// depend on who asks.
    fn cacheable(&self, result: &mut Map<String, Value>) {
        result.entry("ttlMs").or_insert_with(|| json!(self.options.list_ttl_ms));
        let private = result.get("cacheScope").and_then(Value::as_str) == Some("private")
            || (self.options.passthrough.is_some() && self.list_scope() == CacheScope::Private);
        result.insert("cacheScope".into(), json!(if private { "private" } else { "public" }));
    }

    fn list_prompts(
        &self,
        era: Era,
        may: &dyn Fn(&str) -> bool,
        asker: Option<&crate::Asker>,
    ) -> Result<ServerResult, ErrorObject> {
        let prompts = self
            .prompts
            .values()
            .filter(|a| may(&a.name))
            .map(|a| {
                let required: Vec<&str> = a.input_schema["required"]
                    .as_array()
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let arguments: Vec<PromptArgument> = a.input_schema["properties"]
                    .as_object()
                    .map(|props| {
                        props
                            .iter()
                            .map(|(name, schema)| PromptArgument {
                                name: name.clone(),
                                description: schema["description"].as_str().map(str::to_owned),
                                required: Some(required.contains(&name.as_str())),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                Prompt {
                    name: a.name.clone(),
                    title: None,
                    description: Some(a.description.clone()),
                    arguments: (!arguments.is_empty()).then_some(arguments),
                }
            })
            .collect();
        let modern = era == Era::Modern;
        let result = ListPromptsResult {
            result_type: modern.then_some(ResultType::Complete),
            prompts,
            next_cursor: None,
            ttl_ms: modern.then_some(self.options.list_ttl_ms),
            cache_scope: modern.then(|| self.list_scope()),
            meta: None,
        };
        // The passthrough's prompts follow hitl's own, as their upstreams list them.
        let passed = self.passed(asker, |p, a| p.prompts(a));
        if passed.is_empty() {
            return Ok(ServerResult::ListPrompts(result));
        }
        let mut result = to_json(&result)?;
        if let Some(Value::Array(prompts)) = result.get_mut("prompts") {
            prompts.extend(passed.into_iter().map(Value::Object));
        }
        Ok(other(result))
    }
}

/// A result relayed or made as JSON.
fn other(result: Value) -> ServerResult {
    ServerResult::Other(result)
}

/// An agent's final output as prompt messages: its `messages` when it returns some
/// (`[{role, content}]`, content a block or a string), else one user message with the
/// output as JSON text. An error result becomes a JSON-RPC error: prompts have no
/// error results.
pub(crate) fn prompt_result(agent: &Agent, result: CallToolResult) -> Result<GetPromptResult, ErrorObject> {
    let text = result.content.iter().filter_map(ContentBlock::as_text).collect::<Vec<_>>().join("\n");
    if result.is_error == Some(true) {
        return Err(ErrorObject::internal(text));
    }
    let messages = match result.structured_content.as_ref().and_then(|o| o.get("messages")) {
        Some(Value::Array(list)) => {
            list.iter()
                .map(|m| {
                    let role = if m["role"] == "assistant" { Role::Assistant } else { Role::User };
                    let content = match &m["content"] {
                        Value::String(s) => ContentBlock::text(s.clone()),
                        other => serde_json::from_value(other.clone())
                            .unwrap_or_else(|_| ContentBlock::text(other.to_string())),
                    };
                    PromptMessage { role, content }
                })
                .collect()
        }
        _ => vec![PromptMessage { role: Role::User, content: ContentBlock::text(text) }],
    };
    Ok(GetPromptResult {
        result_type: Some(ResultType::Complete),
        description: Some(agent.description.clone()),
        messages,
        meta: None,
    })
}

/// Who asks, for a [`crate::Passthrough`]: the caller's principal, groups and key.
pub(crate) fn asker(caller: &Caller) -> crate::Asker {
    crate::Asker {
        principal: caller.principal.clone(),
        groups: caller.groups.clone(),
        caller: ToolCall {
            capabilities: caller.capabilities.clone(),
            principal: caller.principal.clone(),
            peer: caller.peer.clone(),
            session: caller.session.clone(),
            ..ToolCall::default()
        }
        .caller_key(),
    }
}

/// The client a 2025-era session subscribes as (and its GET stream is told for).
pub(crate) fn session_client(session: &str) -> String {
    format!("session:{session}")
}

/// What a `tools/call` or `prompts/get` sent: its arguments, answers, `requestState` and
/// runtime context.
type Sent = (Option<Map<String, Value>>, Option<hitl_protocol::InputResponses>, Option<String>, Option<Value>);

/// The engine's view of a `tools/call` or `prompts/get`: what was sent, by whom, and how
/// the request follows the run.
pub(crate) fn tool_call(
    caller: Caller,
    resumable: Resumable,
    binding: Binding,
    (arguments, input_responses, request_state, context): Sent,
    progress: Option<hitl_graph::ProgressFn>,
    cancel: Option<Arc<AtomicBool>>,
) -> ToolCall {
    ToolCall {
        arguments: arguments.unwrap_or_default(),
        input_responses,
        request_state,
        context,
        capabilities: caller.capabilities,
        principal: caller.principal,
        groups: caller.groups,
        peer: caller.peer,
        resumable,
        binding,
        progress,
        cancel,
        session: caller.session,
    }
}

/// Adds `why` after the blocks of the error result a 2025-era client gets when a tool
/// pauses ([`hitl_interrupt::LEGACY_CANNOT_ANSWER`], whose text the seed fixes).
fn told_why(result: &mut hitl_protocol::CallToolResult, why: Option<&str>) {
    let paused = result.content.first().and_then(ContentBlock::as_text) == Some(hitl_interrupt::LEGACY_CANNOT_ANSWER);
    if let (Some(why), true, Some(true)) = (why, paused, result.is_error) {
        result.content.push(ContentBlock::text(why));
    }
}

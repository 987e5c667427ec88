//! What a step sees: its context (interrupts, runtime context, metadata), the options of
//! a run, and the errors a step returns.

use std::fmt;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::{Extensions, Interrupt, ResumeValues};

/// The signal a step propagates with `?` when it paused at an `interrupt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted;

/// Why a step did not return an update.
pub enum StepError {
    /// It paused at an interrupt.
    Interrupted,
    /// It failed.
    Failed(Box<dyn std::error::Error + Send + Sync>),
    /// It failed in a way that may pass (a model API that is down or slow): the run
    /// stops with the checkpoint of every superstep that finished, so the same call can
    /// be tried again from there ([`crate::RunError::Transient`]).
    Transient(Box<dyn std::error::Error + Send + Sync>),
}

impl fmt::Debug for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Interrupted => f.write_str("Interrupted"),
            Self::Failed(e) => write!(f, "Failed({e})"),
            Self::Transient(e) => write!(f, "Transient({e})"),
        }
    }
}

impl From<Interrupted> for StepError {
    fn from(_: Interrupted) -> Self {
        Self::Interrupted
    }
}

impl<E: Into<Box<dyn std::error::Error + Send + Sync>>> From<E> for StepError {
    fn from(e: E) -> Self {
        Self::Failed(e.into())
    }
}

impl StepError {
    /// A failure with a message.
    pub fn msg(message: impl fmt::Display) -> Self {
        Self::Failed(message.to_string().into())
    }

    /// A failure that may pass if the call is tried again, with a message.
    pub fn transient(message: impl fmt::Display) -> Self {
        Self::Transient(message.to_string().into())
    }
}

/// Called after each superstep with the number of supersteps finished in this run, and
/// with what steps report ([`StepContext::report_progress`]).
pub type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

/// How far a run is (the params of MCP's `notifications/progress`, less the token).
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// How far: supersteps finished, or what a step reports.
    pub progress: f64,
    /// Out of how much, when known.
    pub total: Option<f64>,
    /// What is going on.
    pub message: Option<String>,
    /// A step reported it ([`StepContext::report_progress`]), on a scale of its own (a
    /// gateway's upstream's), which the caller shows past its own values; `false` for a
    /// run's count of supersteps.
    pub from_step: bool,
}

impl Progress {
    /// `progress` alone.
    pub fn at(progress: f64) -> Self {
        Self { progress, total: None, message: None, from_step: false }
    }
}

/// Where a run records that a step is about to do what must not happen twice (call a
/// destructive tool, send an email). The caller stores the mark before the step goes
/// on, so that a run started again after a crash learns the outcome is unknown
/// instead of acting twice.
pub trait Effects: Send + Sync {
    /// Marks step `step` of superstep `superstep` as about to act; an error means it
    /// must not act. (A checkpoint past `superstep` holds what the step did.)
    fn begin(&self, step: &str, superstep: u32) -> futures_util::future::BoxFuture<'static, Result<(), String>>;
}

/// What a caller gives one run besides its input: the runtime context, metadata about
/// the request, a progress callback, and a way to cancel it.
#[derive(Clone, Default)]
pub struct Run {
    /// The runtime context steps see ([`StepContext::runtime_context`]); not stored.
    pub context: Value,
    /// What the caller knows of the request, as JSON (for MCP: the client's
    /// capabilities, for agents that name no protocol type), visible to steps as
    /// [`StepContext::metadata`]; not stored.
    pub metadata: Metadata,
    /// What the caller knows of the request, typed, one value per type (for MCP: the
    /// client's `ClientCapabilities`), visible to steps as [`StepContext::extension`];
    /// not stored.
    pub extensions: Extensions,
    /// Called as supersteps finish.
    pub progress: Option<ProgressFn>,
    /// Set to stop the run before its next superstep ([`RunError::Cancelled`]); a
    /// superstep that started always finishes.
    pub cancel: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// Where [`StepContext::begin_effect`] records its marks (none: nothing is
    /// recorded, the step goes on).
    pub effects: Option<Arc<dyn Effects>>,
}

impl fmt::Debug for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Run").field("context", &self.context).field("metadata", &self.metadata).finish_non_exhaustive()
    }
}

/// A run's [`Run::metadata`]: given as a value, or made when a step first reads it, so a
/// run whose steps never read it does not make it (for MCP: the client's capabilities
/// as JSON, made per request).
#[derive(Clone, Default)]
pub struct Metadata {
    value: std::sync::OnceLock<Value>,
    make: Option<Arc<MakeMetadata>>,
}

/// What makes a run's metadata from the run's [`Extensions`] (where the typed values it
/// shows as JSON already are).
type MakeMetadata = dyn Fn(&Extensions) -> Value + Send + Sync;

impl Metadata {
    /// Metadata made by `make`, from the run's extensions, when first read.
    pub fn lazy(make: impl Fn(&Extensions) -> Value + Send + Sync + 'static) -> Self {
        Self { value: std::sync::OnceLock::new(), make: Some(Arc::new(make)) }
    }

    /// The metadata of a run whose extensions are `extensions` (`null` when none was
    /// given).
    pub fn get(&self, extensions: &Extensions) -> &Value {
        self.value.get_or_init(|| self.make.as_ref().map_or(Value::Null, |make| make(extensions)))
    }
}

impl From<Value> for Metadata {
    fn from(value: Value) -> Self {
        Self { value: std::sync::OnceLock::from(value), make: None }
    }
}

impl fmt::Debug for Metadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.value.get() {
            Some(value) => value.fmt(f),
            None => f.write_str("(made when read)"),
        }
    }
}

impl Run {
    /// A run with this runtime context and nothing else.
    pub fn with_context(context: Value) -> Self {
        Self { context, ..Self::default() }
    }

    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// Who makes a call, as the server knows them (for MCP: the principal an auth layer
/// or the stdio host named, and its groups), visible to steps as
/// `ctx.extension::<Caller>()`; not stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// `user:<id>`, when known.
    pub principal: Option<String>,
    /// `group:<name>` entries.
    pub groups: Vec<String>,
    /// The client's network address, when known: an anonymous caller's name for
    /// counts kept per caller.
    pub peer: Option<String>,
}

/// The thread of the call a run belongs to, as the audit trail names it, visible to
/// steps as `ctx.extension::<CallThread>()` (the gateway names the approval that covers
/// later calls by it when the caller approved in their client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallThread(pub String);

/// Where a step writes an entry for the audit trail about the call it runs (the
/// gateway: which policy let the call through, and under which version of the rules).
/// The engine puts one in a run's extensions (`ctx.extension::<AuditSink>()`) when the
/// server keeps a trail; without one a step writes nothing.
#[derive(Clone)]
pub struct AuditSink(Arc<dyn Fn(Value) + Send + Sync>);

impl AuditSink {
    /// A sink that hands each entry to `write`.
    pub fn new(write: impl Fn(Value) + Send + Sync + 'static) -> Self {
        Self(Arc::new(write))
    }

    /// Writes `entry` (a JSON object: at least `event`).
    pub fn record(&self, entry: Value) {
        (self.0)(entry);
    }
}

impl fmt::Debug for AuditSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuditSink")
    }
}

/// What a step sees besides the state: the runtime context and `interrupt`.
#[derive(Clone)]
pub struct StepContext {
    pub(crate) step: Arc<str>,
    pub(crate) superstep: u32,
    pub(crate) run: Arc<Run>,
    pub(crate) calls: Arc<Mutex<StepCalls>>,
}

#[derive(Default)]
pub(crate) struct StepCalls {
    pub(crate) next_index: usize,
    pub(crate) resume: ResumeValues,
    pub(crate) pending: Option<Interrupt>,
}

impl StepContext {
    /// The runtime context of the run (the caller's, not stored in checkpoints).
    pub fn runtime_context(&self) -> &Value {
        &self.run.context
    }

    /// Whether the caller listens to progress (an MCP client that sent a
    /// `progressToken`).
    pub fn wants_progress(&self) -> bool {
        self.run.progress.is_some()
    }

    /// Reports progress from inside a step (a gateway relays its upstream's). The
    /// caller receives it as it receives the end of each superstep; it keeps the
    /// values it passes on increasing, as MCP requires.
    pub fn report_progress(&self, progress: Progress) {
        if let Some(report) = &self.run.progress {
            report(Progress { from_step: true, ..progress });
        }
    }

    /// What the caller knows of the request (for MCP: `{"clientCapabilities": …}`).
    pub fn metadata(&self) -> &Value {
        self.run.metadata.get(&self.run.extensions)
    }

    /// The run's typed value of type `T` ([`Run::extensions`]), when the caller gave
    /// one (for MCP: `ctx.extension::<ClientCapabilities>()`).
    pub fn extension<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.run.extensions.get()
    }

    /// The name of the running step.
    pub fn step(&self) -> &str {
        &self.step
    }

    /// Call right before an effect that must happen at most once: the run's
    /// [`Effects`] records it first. Fails the step when it cannot be recorded.
    pub async fn begin_effect(&self) -> Result<(), StepError> {
        match &self.run.effects {
            None => Ok(()),
            Some(effects) => effects.begin(&self.step, self.superstep).await.map_err(StepError::msg),
        }
    }

    /// Asks a question. The first time, returns `Err(Interrupted)`, which the step
    /// propagates with `?`; once resumed, returns the answer given for this call.
    pub fn interrupt(&self, value: Value) -> Result<Value, Interrupted> {
        self.ask(value, None)
    }

    /// Like [`StepContext::interrupt`], with a JSON Schema the answer must fit.
    pub fn interrupt_with_schema(&self, value: Value, response_schema: Value) -> Result<Value, Interrupted> {
        self.ask(value, Some(response_schema))
    }

    /// Asks a typed question: `T`'s JSON Schema (from schemars, the Rust analogue of a
    /// Pydantic model) is the response schema, and the answer is deserialized into `T`.
    ///
    /// Callers that resume runs check answers against the response schema first, so a
    /// value that does not fit is reported before anything runs; one that still fails
    /// to deserialize fails the step with the type's error.
    pub fn interrupt_as<T>(&self, question: Value) -> Result<T, StepError>
    where
        T: schemars::JsonSchema + serde::de::DeserializeOwned,
    {
        let schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default();
        let answer = self.ask(question, Some(schema))?;
        serde_json::from_value(answer)
            .map_err(|e| StepError::msg(format!("the answer does not fit {}: {e}", std::any::type_name::<T>())))
    }

    /// Asks for a sensitive value (a token, an API key) on hitl's secret page, so that it
    /// never passes through the MCP client: `Some(value)` once the person typed it,
    /// `None` when they declined or cancelled.
    pub fn ask_secret(&self, label: &str, message: &str) -> Result<Option<String>, StepError> {
        let request = crate::payload::SecretRequest { label: label.to_owned(), message: message.to_owned() };
        let answer = self.ask(request.to_value(), None)?;
        Ok(match (answer.get("action").and_then(Value::as_str), answer.get("value").and_then(Value::as_str)) {
            (Some("accept"), Some(value)) => Some(value.to_owned()),
            _ => None,
        })
    }

    /// Sends the person to a third party's sign-in page (`url`, with `{state}` where
    /// the round's state goes): the callback's query parameters (`code`, `state`, …)
    /// once the provider redirected back, `None` when they declined or cancelled.
    pub fn sign_in(&self, message: &str, url: &str) -> Result<Option<serde_json::Map<String, Value>>, StepError> {
        let request = crate::payload::SignInRequest { message: message.to_owned(), url: url.to_owned() };
        let answer = self.ask(request.to_value(), None)?;
        Ok(match (answer.get("action").and_then(Value::as_str), answer.get("params")) {
            (Some("accept"), Some(Value::Object(params))) => Some(params.clone()),
            _ => None,
        })
    }

    /// Whether the run was resumed with an answer for this step's next question (the
    /// step asked it before), without taking it.
    pub fn has_answer(&self) -> bool {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        self.with_id(calls.next_index, |id| calls.resume.contains_key(id))
    }

    /// The answer the run was resumed with for this step's next question, taken as
    /// [`StepContext::interrupt`] would take it, or `None` (and nothing asked) when there
    /// is none: a step whose rules changed while it waited (a reload made its tool
    /// allowed) still carries out the answer it was given.
    pub fn answered(&self) -> Option<Value> {
        self.answered_if(|_| true)
    }

    /// [`StepContext::answered`], taking the answer only when `is` says it answers the
    /// question the step would have asked here (a step that may have asked a review
    /// before other questions, under rules that no longer review).
    pub fn answered_if(&self, is: impl Fn(&Value) -> bool) -> Option<Value> {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let answer = self.with_id(calls.next_index, |id| calls.resume.get(id).filter(|answer| is(answer)).cloned())?;
        calls.next_index += 1;
        Some(answer)
    }

    fn ask(&self, value: Value, response_schema: Option<Value>) -> Result<Value, Interrupted> {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let index = calls.next_index;
        calls.next_index += 1;
        let id = match self.with_id(index, |id| calls.resume.get(id).cloned().ok_or_else(|| id.to_owned())) {
            Ok(answer) => return Ok(answer),
            Err(id) => id,
        };
        calls.pending = Some(Interrupt { id, step: self.step.to_string(), value, response_schema });
        Err(Interrupted)
    }

    /// `f` of the id of this step's interrupt `index` (`superstep:step:index`), written
    /// on the stack when it fits: looking an answer up allocates nothing.
    fn with_id<R>(&self, index: usize, f: impl FnOnce(&str) -> R) -> R {
        use std::io::Write as _;
        let mut buffer = [0u8; 128];
        let capacity = buffer.len();
        let mut rest = &mut buffer[..];
        let written = write!(rest, "{}:{}:{}", self.superstep, self.step, index).is_ok();
        let length = capacity - rest.len();
        match std::str::from_utf8(&buffer[..length]) {
            Ok(id) if written => f(id),
            _ => f(&format!("{}:{}:{}", self.superstep, self.step, index)),
        }
    }
}

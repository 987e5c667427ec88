//! The page answers use case: the pages read their question ([`PageAnswers::get`]) and
//! write its answer into the paused thread ([`PageAnswers::answer`], compare-and-set,
//! so one answer wins); the client's next retry resumes the agent with it, and the
//! retries held waiting for the decision are woken.

use std::sync::Arc;

use hitl_protocol::ErrorObject;
use serde_json::{Value, json};

use crate::shared::Core;
use crate::update::{Step, update};
use crate::{EngineError, Event, Page, PageAnswer, PageInput, PageKind, PageView, Question};

/// What hitl's pages do to paused calls: read a page question, answer it. Handed out by
/// [`Engine::pages`](crate::Engine::pages).
#[derive(Clone)]
pub struct PageAnswers {
    core: Arc<Core>,
}

impl std::fmt::Debug for PageAnswers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageAnswers").finish_non_exhaustive()
    }
}

impl PageAnswers {
    pub(crate) fn new(core: Arc<Core>) -> Self {
        Self { core }
    }

    /// The page `id`, when its call is still paused at that round.
    pub async fn get(&self, id: &str) -> Result<Option<PageView>, EngineError> {
        let Some(at) = self.core.secret.verify_page(id) else { return Ok(None) };
        let Some(thread) = self.core.store.load(at.thread).await? else { return Ok(None) };
        Ok(PageView::of(&thread, id, at.index))
    }

    /// Answers page `id` with `input`, given by `by`: stored in the thread unless the
    /// page was answered already (one answer wins).
    pub async fn answer(&self, id: &str, input: PageInput, by: Option<String>) -> Result<PageAnswer, EngineError> {
        let core = &self.core;
        let Some(at) = core.secret.verify_page(id) else { return Ok(PageAnswer::Gone) };
        let answered = update(core.store.as_ref(), at.thread, |thread| {
            let Some(view) = PageView::of(thread, id, at.index) else { return Step::Leave(PageAnswer::Gone) };
            if view.page.answer.is_some() {
                return Step::Leave(PageAnswer::AlreadyAnswered(Box::new(view)));
            }
            let question = &thread.round().expect("the view has its round").questions[at.index];
            let answer = match answer_of(question, &view.page, input.clone(), core) {
                Ok(answer) => answer,
                Err(e) => return Step::Leave(PageAnswer::Refused(e)),
            };
            let mut thread = thread.clone();
            let round = Arc::make_mut(&mut thread.paused_mut().expect("the view has its round").round);
            let page = round.questions[at.index].page.as_mut().expect("the view has its page");
            page.answer = Some(answer);
            page.answered_by = by.clone();
            page.answered_at_ms = Some(core.now_ms());
            thread.version += 1;
            let view = PageView::of(&thread, id, at.index).expect("the page is still there");
            Step::Save(thread, PageAnswer::Taken(Box::new(view)))
        })
        .await?;
        let answered = answered.unwrap_or(PageAnswer::Gone);
        if let PageAnswer::Taken(view) = &answered {
            core.waiting.decided(&view.thread_id);
            core.observe(Event::PageAnswered { page: view });
        }
        Ok(answered)
    }
}

/// The value stored as the page's answer, checked against its question.
fn answer_of(question: &Question, page: &Page, input: PageInput, core: &Core) -> Result<Value, ErrorObject> {
    match (&page.kind, input) {
        (PageKind::Approval { .. }, PageInput::Decision(content)) => {
            crate::questions::check_decision(question, &content)?;
            Ok(Value::Object(content))
        }
        (PageKind::Secret { .. }, PageInput::Secret(value)) => {
            if value.is_empty() {
                return Err(ErrorObject::invalid_params("The value is empty"));
            }
            Ok(json!({ "sealed": core.secret.seal(&value, &page.id) }))
        }
        (PageKind::SignIn, PageInput::Callback(params)) => Ok(Value::Object(params)),
        _ => Err(ErrorObject::invalid_params("This page does not take that kind of answer")),
    }
}

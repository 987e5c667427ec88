use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::FutureExt as _;
use serde_json::{Value, json};

use super::*;

fn block<F: Future>(f: F) -> F::Output {
    f.now_or_never().expect("steps in these tests never wait")
}

fn paused(outcome: Outcome) -> (Vec<Interrupt>, Checkpoint) {
    match outcome {
        Outcome::Paused { interrupts, checkpoint } => (interrupts, checkpoint),
        other => panic!("expected a pause, got {other:?}"),
    }
}

fn answer(interrupts: &[Interrupt], value: Value) -> ResumeValues {
    interrupts.iter().map(|i| (i.id.clone(), value.clone())).collect()
}

#[test]
fn code_before_interrupt_reruns_and_code_after_runs_once() {
    let before = Arc::new(AtomicUsize::new(0));
    let after = Arc::new(AtomicUsize::new(0));
    let (b, a) = (before.clone(), after.clone());
    let graph = StateGraph::new()
        .add_step("ask", move |_, ctx| {
            let (b, a) = (b.clone(), a.clone());
            async move {
                b.fetch_add(1, Ordering::SeqCst);
                let v = ctx.interrupt(json!("q"))?;
                a.fetch_add(1, Ordering::SeqCst);
                Ok(json!({ "v": v }))
            }
        })
        .add_edge(START, "ask")
        .compile()
        .unwrap();
    let (interrupts, cp) = paused(block(graph.invoke(json!({}), Value::Null)).unwrap());
    assert_eq!(interrupts.len(), 1);
    assert_eq!(interrupts[0].id, "0:ask:0");
    let done = block(graph.resume(cp, answer(&interrupts, json!(1)), Value::Null)).unwrap();
    assert_eq!(done, Outcome::Done(json!({"v": 1})));
    assert_eq!(before.load(Ordering::SeqCst), 2);
    assert_eq!(after.load(Ordering::SeqCst), 1);
}

#[test]
fn an_interrupt_of_a_step_with_a_long_name_is_answered_by_its_id() {
    // Ids are written on the stack to look answers up; a name past that buffer (or
    // one of many bytes per character) is looked up the same.
    for name in ["s".repeat(200), "é".repeat(70), "ask".to_owned()] {
        let graph = StateGraph::new()
            .add_step(&name, |_, ctx| async move {
                let first = ctx.interrupt(json!("q1"))?;
                let given = ctx.has_answer();
                let second = ctx.interrupt(json!("q2"))?;
                assert!(given, "an answer taken was there to be seen");
                Ok(json!({ "v": [first, second] }))
            })
            .add_edge(START, &name)
            .compile()
            .unwrap();
        let (interrupts, cp) = paused(block(graph.invoke(json!({}), Value::Null)).unwrap());
        assert_eq!(interrupts[0].id, format!("0:{name}:0"));
        let mut values = answer(&interrupts, json!(1));
        let (interrupts, cp) = paused(block(graph.resume(cp, values.clone(), Value::Null)).unwrap());
        assert_eq!(interrupts[0].id, format!("0:{name}:1"));
        values.extend(answer(&interrupts, json!(2)));
        let done = block(graph.resume(cp, values, Value::Null)).unwrap();
        assert_eq!(done, Outcome::Done(json!({"v": [1, 2]})), "{name}");
    }
}

#[test]
fn a_step_that_no_longer_asks_still_takes_the_answer_it_was_given() {
    // The same step under two rules: the first asks, the second (after a reload)
    // takes an answer only if the run was resumed with one.
    let step = |asks: bool| {
        move |_: Value, ctx: StepContext| async move {
            let answer = if asks { Some(ctx.interrupt(json!("q"))?) } else { ctx.answered() };
            Ok(json!({ "answer": answer }))
        }
    };
    let graph = |asks: bool| StateGraph::new().add_step("gate", step(asks)).add_edge(START, "gate").compile().unwrap();
    let (interrupts, cp) = paused(block(graph(true).invoke(json!({}), Value::Null)).unwrap());
    let done = block(graph(false).resume(cp, answer(&interrupts, json!("yes")), Value::Null)).unwrap();
    assert_eq!(done, Outcome::Done(json!({"answer": "yes"})));
    let fresh = block(graph(false).invoke(json!({}), Value::Null)).unwrap();
    assert_eq!(fresh, Outcome::Done(json!({"answer": null})), "nothing asked, nothing answered");
}

#[test]
fn parallel_interrupts_pause_together_and_finished_steps_do_not_rerun() {
    let quick_runs = Arc::new(AtomicUsize::new(0));
    let q = quick_runs.clone();
    let graph = StateGraph::new()
        .add_step("a", |_, ctx| async move { Ok(json!({ "a": ctx.interrupt(json!("qa"))? })) })
        .add_step("b", |_, ctx| async move { Ok(json!({ "b": ctx.interrupt(json!("qb"))? })) })
        .add_step("quick", move |_, _| {
            let q = q.clone();
            async move {
                q.fetch_add(1, Ordering::SeqCst);
                Ok(json!({ "quick": true }))
            }
        })
        .add_edge(START, "a")
        .add_edge(START, "b")
        .add_edge(START, "quick")
        .compile()
        .unwrap();
    let (interrupts, cp) = paused(block(graph.invoke(json!({}), Value::Null)).unwrap());
    assert_eq!(interrupts.iter().map(|i| i.value.clone()).collect::<Vec<_>>(), vec![json!("qa"), json!("qb")]);
    // Answer only one: the other asks again.
    let partial = [(interrupts[0].id.clone(), json!(1))].into_iter().collect();
    let (again, cp) = paused(block(graph.resume(cp, partial, Value::Null)).unwrap());
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].value, json!("qb"));
    let done = block(graph.resume(cp, answer(&again, json!(2)), Value::Null)).unwrap();
    assert_eq!(done, Outcome::Done(json!({"a": 1, "b": 2, "quick": true})));
    assert_eq!(quick_runs.load(Ordering::SeqCst), 1);
}

#[test]
fn checkpoint_round_trips_byte_for_byte() {
    let graph = StateGraph::new()
        .add_step("ask", |_, ctx| async move { Ok(json!({ "v": ctx.interrupt(json!({"deep": [1, 2]}))? })) })
        .add_edge(START, "ask")
        .compile()
        .unwrap();
    let (_, cp) = paused(block(graph.invoke(json!({"seed": "x"}), Value::Null)).unwrap());
    let text = serde_json::to_string(&cp).unwrap();
    let back: Checkpoint = serde_json::from_str(&text).unwrap();
    assert_eq!(serde_json::to_string(&back).unwrap(), text);
    assert_eq!(back, cp);
}

#[test]
fn two_interrupts_in_one_step_are_asked_in_turn() {
    let graph = StateGraph::new()
        .add_step("two", |_, ctx| async move {
            let first = ctx.interrupt(json!("one"))?;
            let second = ctx.interrupt(json!("two"))?;
            Ok(json!({ "first": first, "second": second }))
        })
        .add_edge(START, "two")
        .compile()
        .unwrap();
    let (i1, cp) = paused(block(graph.invoke(json!({}), Value::Null)).unwrap());
    let (i2, cp) = paused(block(graph.resume(cp, answer(&i1, json!(1)), Value::Null)).unwrap());
    assert_eq!(i2[0].value, json!("two"));
    assert_ne!(i1[0].id, i2[0].id);
    let done = block(graph.resume(cp, answer(&i2, json!(2)), Value::Null)).unwrap();
    assert_eq!(done, Outcome::Done(json!({"first": 1, "second": 2})));
}

#[test]
fn runtime_context_is_the_callers_and_not_stored() {
    let graph = StateGraph::new()
        .add_step("echo", |_, ctx| async move {
            let answer = ctx.interrupt(json!("Say something."))?;
            Ok(json!({ "answer": answer, "context": ctx.runtime_context().clone() }))
        })
        .add_edge(START, "echo")
        .compile()
        .unwrap();
    let (i, cp) = paused(block(graph.invoke(json!({}), json!({"user": "first"}))).unwrap());
    assert!(!serde_json::to_string(&cp).unwrap().contains("first"));
    let done = block(graph.resume(cp, answer(&i, json!("hi")), json!({"user": "second"}))).unwrap();
    assert_eq!(done, Outcome::Done(json!({"answer": "hi", "context": {"user": "second"}})));
}

#[test]
fn compile_reports_every_problem() {
    let err = StateGraph::new()
        .add_step("a", |_, _| async { Ok(json!({})) })
        .add_step("orphan", |_, _| async { Ok(json!({})) })
        .add_edge("a", "missing")
        .add_edge("ghost", "a")
        .compile()
        .unwrap_err();
    assert_eq!(
        err.problems,
        vec![
            "edge from unknown step ghost",
            "edge to unknown step missing",
            "no edge from START",
            "no edge reaches step a",
            "no edge reaches step orphan",
        ]
    );
}

#[test]
fn errors_and_panics_name_the_step() {
    let graph = StateGraph::new()
        .add_step("bad", |_, _| async { Err::<Value, _>(StepError::msg("boom")) })
        .add_edge(START, "bad")
        .compile()
        .unwrap();
    let err = block(graph.invoke(json!({}), Value::Null)).unwrap_err();
    assert_eq!(err.to_string(), "step bad failed: boom");
    let graph =
        StateGraph::new().add_step("wild", |_, _| async { panic!("oops") }).add_edge(START, "wild").compile().unwrap();
    let err = block(graph.invoke(json!({}), Value::Null)).unwrap_err();
    assert_eq!(err.to_string(), "step wild panicked: oops");
}

#[test]
fn runaway_graphs_hit_the_recursion_limit() {
    let graph = StateGraph::new()
        .add_step("loop", |_, _| async { Ok(json!({})) })
        .add_edge(START, "loop")
        .add_edge("loop", "loop")
        .recursion_limit(5)
        .compile()
        .unwrap();
    assert!(matches!(block(graph.invoke(json!({}), Value::Null)), Err(RunError::RecursionLimit(5))));
}

#[test]
fn conditional_edges_and_append_reducer() {
    let graph = StateGraph::new()
        .add_step("count", |state, _| async move {
            let n = state["log"].as_array().map_or(0, Vec::len);
            Ok(json!({ "log": n }))
        })
        .add_edge(START, "count")
        .add_conditional_edges("count", |state| {
            if state["log"].as_array().map_or(0, Vec::len) < 3 { vec!["count".into()] } else { vec![END.into()] }
        })
        .reducer("log", Reducer::Append)
        .compile()
        .unwrap();
    let done = block(graph.invoke(json!({}), Value::Null)).unwrap();
    assert_eq!(done, Outcome::Done(json!({"log": [0, 1, 2]})));
}

#[test]
fn static_breakpoint_stops_before_the_step() {
    let graph = StateGraph::new()
        .add_step("prepare", |_, _| async { Ok(json!({"ready": true})) })
        .add_step("release", |_, _| async { Ok(json!({"released": true})) })
        .add_edge(START, "prepare")
        .add_edge("prepare", "release")
        .interrupt_before("release")
        .compile()
        .unwrap();
    match block(graph.invoke(json!({}), Value::Null)).unwrap() {
        Outcome::Breakpoint { state, checkpoint } => {
            assert_eq!(state, json!({"ready": true}));
            assert_eq!(checkpoint.next, vec!["release".to_owned()]);
        }
        other => panic!("expected a breakpoint, got {other:?}"),
    }
}

#[derive(Debug, PartialEq, serde::Deserialize, schemars::JsonSchema)]
struct Plan {
    replicas: u8,
}

#[test]
fn typed_interrupts_carry_the_schema_and_return_the_type() {
    let graph = StateGraph::new()
        .add_step("plan", |_, ctx| async move {
            let plan: Plan = ctx.interrupt_as(json!("How many?"))?;
            Ok(json!({ "replicas": plan.replicas }))
        })
        .add_edge(START, "plan")
        .compile()
        .unwrap();
    let (interrupts, cp) = paused(block(graph.invoke(json!({}), Value::Null)).unwrap());
    let schema = interrupts[0].response_schema.as_ref().unwrap();
    assert_eq!(schema["properties"]["replicas"]["type"], "integer");
    let bad =
        block(graph.resume(cp.clone(), answer(&interrupts, json!({"replicas": "many"})), Value::Null)).unwrap_err();
    assert!(bad.to_string().contains("does not fit"), "{bad}");
    let done = block(graph.resume(cp, answer(&interrupts, json!({"replicas": 3})), Value::Null)).unwrap();
    assert_eq!(done, Outcome::Done(json!({"replicas": 3})));
}

#[test]
fn output_keys_project_the_final_state() {
    let graph = StateGraph::new()
        .add_step("s", |state, _| async move { Ok(json!({ "result": format!("got {}", state["input"]) })) })
        .add_edge(START, "s")
        .output_keys(["result"])
        .compile()
        .unwrap();
    let done = block(graph.invoke(json!({"input": 1}), Value::Null)).unwrap();
    assert_eq!(done, Outcome::Done(json!({"result": "got 1"})));
}

mod random_graphs {
    //! For random layered graphs of up to 8 steps with random interrupt placements,
    //! resuming every pause eventually reaches `Done`, and each step's code after its
    //! interrupts runs exactly once.

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use proptest::prelude::*;
    use serde_json::json;

    use super::{block, *};

    fn layers() -> impl Strategy<Value = Vec<Vec<u8>>> {
        // Each layer: the number of interrupts (0..=2) of each of its steps.
        prop::collection::vec(prop::collection::vec(0u8..=2, 1..=3), 1..=4)
            .prop_filter("at most 8 steps", |l| l.iter().map(Vec::len).sum::<usize>() <= 8)
    }

    proptest! {
        #[test]
        fn every_pause_resumes_to_done_and_post_interrupt_code_runs_once(layers in layers()) {
            let mut graph = StateGraph::new();
            let mut counters = Vec::new();
            let mut previous: Vec<String> = vec![START.to_owned()];
            for (l, layer) in layers.iter().enumerate() {
                let mut names = Vec::new();
                for (s, &asks) in layer.iter().enumerate() {
                    let name = format!("l{l}s{s}");
                    let after = Arc::new(AtomicUsize::new(0));
                    counters.push((name.clone(), after.clone()));
                    let key = name.clone();
                    graph = graph.add_step(name.clone(), move |_, ctx| {
                        let (after, key) = (after.clone(), key.clone());
                        async move {
                            let mut answers = Vec::new();
                            for i in 0..asks {
                                answers.push(ctx.interrupt(json!(format!("{key} q{i}")))?);
                            }
                            after.fetch_add(1, Ordering::SeqCst);
                            Ok(json!({ key: answers }))
                        }
                    });
                    for from in &previous {
                        graph = graph.add_edge(from.clone(), name.clone());
                    }
                    names.push(name);
                }
                previous = names;
            }
            let graph = graph.compile().unwrap();
            let mut outcome = block(graph.invoke(json!({}), Value::Null)).unwrap();
            let mut pauses = 0;
            let output = loop {
                match outcome {
                    Outcome::Done(output) => break output,
                    Outcome::Paused { interrupts, checkpoint } => {
                        pauses += 1;
                        prop_assert!(pauses <= 20, "too many pauses");
                        let values = interrupts.iter().map(|i| (i.id.clone(), json!(i.id))).collect();
                        outcome = block(graph.resume(checkpoint, values, Value::Null)).unwrap();
                    }
                    Outcome::Breakpoint { .. } => unreachable!("no breakpoints"),
                }
            };
            for (name, after) in &counters {
                prop_assert_eq!(after.load(Ordering::SeqCst), 1, "{}", name);
                prop_assert!(output.get(name).is_some());
            }
            let total: usize = layers.iter().flatten().map(|&n| n as usize).sum();
            let max_per_step = layers.iter().flatten().copied().max().unwrap_or(0) as usize;
            prop_assert!(pauses <= total);
            prop_assert!(pauses >= max_per_step.min(total));
        }
    }
}

#[test]
fn runs_report_progress_see_metadata_and_can_be_cancelled() {
    let graph = StateGraph::new()
        .add_step("a", |_, ctx| async move { Ok(json!({ "caps": ctx.metadata()["caps"].clone() })) })
        .add_step("b", |_, ctx| async move {
            assert!(ctx.wants_progress());
            ctx.report_progress(Progress { total: Some(2.0), message: Some("halfway".into()), ..Progress::at(1.5) });
            Ok(json!({ "b": true }))
        })
        .add_edge(START, "a")
        .add_edge("a", "b")
        .compile()
        .unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    let run = Run {
        metadata: json!({"caps": {"sampling": {}}}).into(),
        progress: Some(Arc::new(move |p: Progress| s.lock().unwrap().push((p.progress, p.message, p.from_step)))),
        ..Run::default()
    };
    let done = block(graph.invoke_run(json!({}), run)).unwrap();
    assert_eq!(done, Outcome::Done(json!({"caps": {"sampling": {}}, "b": true})));
    let halfway = Some("halfway".to_owned());
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(1.0, None, false), (1.5, halfway, true), (2.0, None, false)],
        "supersteps, and a step's report (marked as the step's)"
    );
    let cancel = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let run = Run { cancel: Some(cancel), ..Run::default() };
    assert!(matches!(block(graph.invoke_run(json!({}), run)), Err(RunError::Cancelled(_))));
}

#[test]
fn a_cancelled_run_keeps_its_finished_steps_and_a_finished_run_ignores_cancel() {
    // The step after the interrupt has a side effect (a sent email): it must run once
    // even when the caller goes away right after it.
    let sent = Arc::new(AtomicUsize::new(0));
    let cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (s, c) = (sent.clone(), cancel.clone());
    let graph = StateGraph::new()
        .add_step("ask", |_, ctx| async move { Ok(json!({ "ok": ctx.interrupt(json!("send?"))? })) })
        .add_step("send", move |_, _| {
            let (s, c) = (s.clone(), c.clone());
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                c.store(true, Ordering::SeqCst);
                Ok(json!({ "sent": true }))
            }
        })
        .add_step("report", |_, _| async { Ok(json!({ "reported": true })) })
        .add_edge(START, "ask")
        .add_edge("ask", "send")
        .add_edge("send", "report")
        .compile()
        .unwrap();
    let (interrupts, checkpoint) = paused(block(graph.invoke(json!({}), Value::Null)).unwrap());
    let run = Run { cancel: Some(cancel.clone()), ..Run::default() };
    let Err(RunError::Cancelled(kept)) = block(graph.resume_run(checkpoint, answer(&interrupts, json!(true)), run))
    else {
        panic!("the run stops between supersteps")
    };
    assert_eq!(kept.next, vec!["report".to_owned()]);
    assert_eq!(kept.state["sent"], true);
    cancel.store(false, Ordering::SeqCst);
    let done = block(graph.resume(*kept, ResumeValues::new(), Value::Null)).unwrap();
    assert_eq!(done, Outcome::Done(json!({"ok": true, "sent": true, "reported": true})));
    assert_eq!(sent.load(Ordering::SeqCst), 1, "the finished step never runs again");

    // A run whose last superstep finished is done, cancelled or not.
    let one = StateGraph::new().add_step("only", |_, _| async { Ok(json!({"x": 1})) }).add_edge(START, "only");
    let one = one.compile().unwrap();
    let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let f = flag.clone();
    let run = Run {
        progress: Some(Arc::new(move |_| f.store(true, Ordering::SeqCst))),
        cancel: Some(flag),
        ..Run::default()
    };
    assert_eq!(block(one.invoke_run(json!({}), run)).unwrap(), Outcome::Done(json!({"x": 1})));
}

#[test]
fn static_breakpoint_stops_after_the_step_and_resumes_past_it() {
    let graph = StateGraph::new()
        .add_step("prepare", |_, _| async { Ok(json!({"ready": true})) })
        .add_step("release", |_, _| async { Ok(json!({"released": true})) })
        .add_edge(START, "prepare")
        .add_edge("prepare", "release")
        .interrupt_after("prepare")
        .compile()
        .unwrap();
    let Outcome::Breakpoint { state, checkpoint } = block(graph.invoke(json!({}), Value::Null)).unwrap() else {
        panic!("expected a breakpoint")
    };
    assert_eq!(state, json!({"ready": true}));
    let done = block(graph.resume(checkpoint, ResumeValues::new(), Value::Null)).unwrap();
    assert_eq!(done, Outcome::Done(json!({"ready": true, "released": true})));
}

#[test]
fn a_guard_runs_first_and_its_verdict_ends_the_run() {
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = ran.clone();
    let graph = StateGraph::new()
        .add_step("work", move |state, _| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(json!({ "out": format!("worked on {}", state["job"].as_str().unwrap_or("?")) }))
            }
        })
        .add_edge(START, "work")
        .output_key("out")
        .compile()
        .unwrap();
    let guard = |_, ctx: StepContext| async move {
        match ctx.interrupt(json!("go on?"))?.as_str() {
            Some("yes") => Ok(json!({})),
            Some("other") => Ok(json!({"job": "another job"})),
            _ => Ok(json!({"verdict": "refused"})),
        }
    };
    let guarded = graph.guarded("guard", guard, "verdict").unwrap();
    assert!(graph.guarded("work", |_, _| async { Ok(json!({})) }, "v").is_none(), "a step of that name exists");

    let outcomes: Vec<Value> = ["yes", "other", "no"]
        .into_iter()
        .map(|said| {
            let (interrupts, cp) = paused(block(guarded.invoke(json!({"job": "the job"}), Value::Null)).unwrap());
            assert_eq!(interrupts[0].value, json!("go on?"));
            match block(guarded.resume(cp, answer(&interrupts, json!(said)), Value::Null)).unwrap() {
                Outcome::Done(output) => output,
                other => panic!("{other:?}"),
            }
        })
        .collect();
    assert_eq!(outcomes, [json!("worked on the job"), json!("worked on another job"), json!("refused")]);
    assert_eq!(ran.load(Ordering::SeqCst), 2, "a verdict stops the run before the graph's own steps");
}

#[test]
fn lazy_metadata_is_made_once_when_a_step_first_reads_it_and_never_otherwise() {
    let made = Arc::new(AtomicUsize::new(0));
    let run = || {
        let made = made.clone();
        Run {
            metadata: crate::Metadata::lazy(move |_| {
                made.fetch_add(1, Ordering::SeqCst);
                json!({"k": 1})
            }),
            ..Run::default()
        }
    };
    let silent =
        StateGraph::new().add_step("a", |_, _| async { Ok(json!({})) }).add_edge(START, "a").compile().unwrap();
    block(silent.invoke_run(json!({}), run())).unwrap();
    assert_eq!(made.load(Ordering::SeqCst), 0, "no step read it");
    let reading = StateGraph::new()
        .add_step("a", |_, ctx| async move { Ok(json!({ "a": ctx.metadata()["k"].clone() })) })
        .add_step("b", |_, ctx| async move { Ok(json!({ "b": ctx.metadata()["k"].clone() })) })
        .add_edge(START, "a")
        .add_edge("a", "b")
        .compile()
        .unwrap();
    let done = block(reading.invoke_run(json!({}), run())).unwrap();
    assert_eq!(done, Outcome::Done(json!({"a": 1, "b": 1})));
    assert_eq!(made.load(Ordering::SeqCst), 1, "made once, for both steps");
}

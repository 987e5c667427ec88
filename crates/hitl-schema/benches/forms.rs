//! `cargo bench -p hitl-schema`: conversion and validation per call.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use hitl_schema::{FormOptions, to_form, validate};
use serde_json::json;

fn forms(c: &mut Criterion) {
    let deployment = json!({
        "title": "Deployment", "type": "object",
        "properties": {
            "region": {"enum": ["us-east-1", "eu-west-1"], "title": "Region", "type": "string"},
            "replicas": {"maximum": 10, "minimum": 1, "title": "Replicas", "type": "integer"}
        },
        "required": ["region", "replicas"]
    });
    let options = FormOptions::default();
    c.bench_function("to_form/deployment", |b| b.iter(|| to_form(black_box(&deployment), &options).unwrap()));
    let form = to_form(&deployment, &options).unwrap().schema;
    let answer = json!({"region": "eu-west-1", "replicas": 3});
    let answer = answer.as_object().unwrap();
    validate(&form, answer).unwrap();
    c.bench_function("validate/deployment (warm cache)", |b| b.iter(|| validate(black_box(&form), black_box(answer))));
    let bad = json!({"region": "eu-west-1", "replicas": 20});
    let bad = bad.as_object().unwrap();
    c.bench_function("validate/deployment, invalid (warm cache)", |b| {
        b.iter(|| validate(black_box(&form), black_box(bad)))
    });
}

criterion_group!(benches, forms);
criterion_main!(benches);

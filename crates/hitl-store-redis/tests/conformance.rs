//! The store conformance suite against a real Redis (`REDIS_URL`). Without it, the
//! suite cannot run here; `cargo xtask test` starts a Redis and reports when it could
//! not.

use std::time::{SystemTime, UNIX_EPOCH};

use hitl_store_redis::RedisStore;

#[tokio::test]
async fn redis_store_conforms() {
    let Ok(url) = std::env::var("REDIS_URL") else {
        eprintln!("hitl-store-redis: REDIS_URL is not set; the Redis conformance suite did not run");
        return;
    };
    let store = RedisStore::connect(&url).await.expect("Redis at REDIS_URL answers");
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let prefix = uuid::Uuid::now_v7().to_string();
    hitl_interrupt::conformance::run(&store, &prefix, now).await;
}

#[tokio::test]
async fn unreachable_redis_is_a_clear_error() {
    let err = RedisStore::connect("redis://127.0.0.1:1/0").await.unwrap_err();
    assert!(err.to_string().starts_with("thread store unavailable"), "{err}");
}

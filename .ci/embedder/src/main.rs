//! What a SQLite-only embedder can do with the packaged crates, checked by
//! running it: open a SQLite store, be refused a PostgreSQL URL by name,
//! read an operation's numbers exactly (no serde_json feature forced on this
//! crate), and name the HTTP layer's types.

use idem::core::{Operation, OperationLimits, Value};
use idem::engine::Engine;
use idem::store::StoreOptions;
use idem_http::IdempotencyLayer;

/// The layer over an engine: compiles against a SQLite-only build.
#[allow(dead_code)]
fn layer(engine: Engine) -> IdempotencyLayer {
    IdempotencyLayer::new(engine).tenant("shop")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("idem-embedder-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = format!("sqlite:{}", dir.join("idem.db").display());
    let store = idem::store::open(&url, StoreOptions::default()).await?;
    println!("opened {}", store.describe());
    drop(store);
    std::fs::remove_dir_all(&dir)?;

    let refused = idem::store::open("postgres://127.0.0.1/test", StoreOptions::default())
        .await
        .err()
        .ok_or("a SQLite-only build opened a PostgreSQL store")?;
    let refused = refused.to_string();
    if !refused.contains("cargo feature `postgres`") {
        return Err(format!("the refusal does not name the feature: {refused}").into());
    }
    println!("refused: {refused}");

    let op = Operation::from_json(
        r#"{"kind":"charge","tenant":"t","fields":{"amount":12.50,"big":123456789012345678901234567890}}"#,
        &OperationLimits::default(),
    )?;
    for (field, expected) in [("amount", "12.5"), ("big", "123456789012345678901234567890")] {
        match op.fields.get(field) {
            Some(Value::Number(n)) if n == expected => {}
            other => return Err(format!("{field}: {other:?}, expected {expected}").into()),
        }
    }
    println!("numbers kept exactly: {}", op.canonical_json());
    Ok(())
}

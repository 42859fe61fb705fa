//! The object-safe form of a `Tool` the server holds, and the input schema generated from its `Args`.

use crate::{CallCx, Tool, ToolFailure, ToolOutput};
use schemars::{JsonSchema, generate::SchemaSettings};
use serde_json::Value;
use std::{future::Future, pin::Pin, sync::Arc};

/// What running a call's future gives: the arguments could not be read, or
/// the tool ran.
pub(crate) enum Outcome {
    /// serde refused the arguments (the tool was not called).
    BadArguments(String),
    /// The tool's own answer.
    Ran(Result<ToolOutput, ToolFailure>),
}

/// A call's arguments, checked against the tool's schema: still text when
/// the schema's fast shape accepted them, else the tree the full check built.
pub(crate) enum Arguments {
    /// The JSON text, accepted by the fast shape.
    Text(String),
    /// The tree the full check built and accepted.
    Tree(Value),
}

/// A boxed call, ready to be spawned.
pub(crate) type CallFuture = Pin<Box<dyn Future<Output = Outcome> + Send + 'static>>;

/// A tool with its argument type erased.
pub(crate) trait ErasedTool: Send + Sync + 'static {
    /// The call as a future that deserialises `args` and then runs the tool.
    /// Nothing of the tool's code runs until the future is polled, so a panic
    /// anywhere in it (even in a `Deserialize` impl) stays inside the task
    /// that polls it.
    fn start(&self, args: Arguments, cx: CallCx) -> CallFuture;
}

/// Wraps a typed tool.
pub(crate) struct Typed<T>(pub(crate) Arc<T>);

impl<T: Tool> ErasedTool for Typed<T> {
    fn start(&self, args: Arguments, cx: CallCx) -> CallFuture {
        let tool = Arc::clone(&self.0);
        Box::pin(async move {
            let typed = match args {
                Arguments::Text(text) => serde_json::from_str::<T::Args>(&text),
                Arguments::Tree(tree) => serde_json::from_value::<T::Args>(tree),
            };
            match typed {
                Ok(args) => Outcome::Ran(tool.call(args, cx).await),
                Err(e) => Outcome::BadArguments(e.to_string()),
            }
        })
    }
}

/// The JSON Schema (draft 2020-12) of the values `A` deserialises from.
pub fn schema_value<A: JsonSchema>() -> Value {
    let schema = SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator()
        .into_root_schema_for::<A>();
    match schema.to_value() {
        // Boolean schemas (`serde_json::Value` gives `true`) become the
        // object forms a spec needs.
        Value::Bool(true) => Value::Object(Default::default()),
        Value::Bool(false) => serde_json::json!({"not": {}}),
        other => other,
    }
}

/// [`schema_value`] as the JSON text a spec's `input_schema` holds.
pub fn schema_text<A: JsonSchema>() -> String {
    schema_value::<A>().to_string()
}

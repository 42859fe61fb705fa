//! A `tools/call` whose arguments name a key twice, caught in the message's
//! text before rmcp parses it into a map (which keeps only the last value):
//! refused on every door with gRPC's own words.

use rmcp::ErrorData;
use rmcp::model::{RequestId, ServerJsonRpcMessage};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use toolmesh::schema::{ArgumentsError, parse_arguments};

/// The parts of a JSON-RPC message the check needs, borrowed from its text.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default)]
    id: Option<RequestId>,
    #[serde(default, borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    params: Option<Params<'a>>,
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
}

/// The JSON-RPC error (invalid params, worded as gRPC words it) answering
/// `message` when it is a `tools/call` whose arguments repeat a key; `None`
/// for anything else, which goes on to rmcp (malformed text included: rmcp
/// and the HTTP door say what is wrong with it).
pub(crate) fn refusal(message: &[u8]) -> Option<ServerJsonRpcMessage> {
    // rmcp's stdio reader skips a byte-order mark; so does this check.
    let message = message.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(message);
    let envelope: Envelope<'_> = serde_json::from_slice(message).ok()?;
    if envelope.method.as_deref() != Some("tools/call") {
        return None;
    }
    let arguments = envelope.params?.arguments?;
    match parse_arguments(arguments.get()) {
        Err(repeated @ ArgumentsError::DuplicateKey { .. }) => Some(ServerJsonRpcMessage::error(
            ErrorData::invalid_params(repeated.to_string(), None),
            envelope.id,
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused(text: &str) -> Option<serde_json::Value> {
        refusal(text.as_bytes()).map(|m| serde_json::to_value(m).unwrap())
    }

    /// A repeated key at any depth of the arguments is invalid params
    /// naming the key and where it is, answered to the request's id.
    #[test]
    fn repeated_argument_keys_are_invalid_params() {
        let answer = refused(
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{"a":{"to":1,"to":2}}}}"#,
        )
        .unwrap();
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["error"]["code"], -32602);
        let expected = ArgumentsError::DuplicateKey {
            key: "to".into(),
            path: "/a".into(),
        }
        .to_string();
        assert_eq!(answer["error"]["message"], json!(expected));
    }

    /// Everything else goes on: unique keys, other methods, no arguments,
    /// text that is not a JSON-RPC message.
    #[test]
    fn everything_else_passes() {
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"a":1,"b":{"a":1}}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"arguments":{"a":1,"a":2}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
            "{",
            "[]",
            "",
        ] {
            assert_eq!(refused(text), None, "{text}");
        }
    }
}

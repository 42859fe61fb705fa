//! A result's content parts (`ToolResult.parts`): MCP content blocks to and from their typed form, the text a text-only reader gets for them, and notes the dispatcher adds in front.

use crate::pb::{
    ContentPart, EmbeddedResource, Media, ResourceLink, ToolResult, content_part::Part,
    embedded_resource::Contents,
};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

/// Why an MCP content block has no typed part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContentError {
    /// Not an object with a `type` MCP defines for tool results.
    #[error("a content block of type {0:?}, which tool results do not carry")]
    UnknownType(String),
    /// A field the block's type requires is missing or not a string.
    #[error("a {kind} content block without its {field:?} string")]
    Missing {
        /// The block's type.
        kind: &'static str,
        /// The field.
        field: &'static str,
    },
    /// `data` or `blob` that is not base64.
    #[error("a {kind} content block whose {field:?} is not base64 ({reason})")]
    NotBase64 {
        /// The block's type.
        kind: &'static str,
        /// The field.
        field: &'static str,
        /// What the decoder said.
        reason: String,
    },
}

/// A text part.
pub fn text(text: impl Into<String>) -> ContentPart {
    part(Part::Text(text.into()))
}

/// An image part: its bytes and media type (`image/png`).
pub fn image(data: impl Into<Vec<u8>>, mime_type: impl Into<String>) -> ContentPart {
    part(Part::Image(Media {
        data: data.into(),
        mime_type: mime_type.into(),
    }))
}

/// An audio part: its bytes and media type (`audio/wav`).
pub fn audio(data: impl Into<Vec<u8>>, mime_type: impl Into<String>) -> ContentPart {
    part(Part::Audio(Media {
        data: data.into(),
        mime_type: mime_type.into(),
    }))
}

/// A link to the resource at `uri`, called `name`.
pub fn resource_link(uri: impl Into<String>, name: impl Into<String>) -> ContentPart {
    part(Part::ResourceLink(ResourceLink {
        uri: uri.into(),
        name: name.into(),
        ..ResourceLink::default()
    }))
}

fn part(part: Part) -> ContentPart {
    ContentPart {
        part: Some(part),
        ..ContentPart::default()
    }
}

/// One line for a text-only reader: a text part as it is, an embedded text
/// resource's text, and a bracketed description of anything else.
pub fn describe(part: &ContentPart) -> String {
    match &part.part {
        Some(Part::Text(text)) => text.clone(),
        Some(Part::Image(media)) => {
            format!("[image {}, {} bytes]", media.mime_type, media.data.len())
        }
        Some(Part::Audio(media)) => {
            format!("[audio {}, {} bytes]", media.mime_type, media.data.len())
        }
        Some(Part::ResourceLink(link)) => {
            let mut line = format!("[resource link {}", link.uri);
            if !link.name.is_empty() && link.name != link.uri {
                line.push_str(&format!(" ({})", link.name));
            }
            if !link.mime_type.is_empty() {
                line.push_str(&format!(", {}", link.mime_type));
            }
            line.push(']');
            line
        }
        Some(Part::Resource(resource)) => match &resource.contents {
            Some(Contents::Text(text)) => text.clone(),
            Some(Contents::Blob(blob)) => {
                format!("[resource {}, {} bytes]", resource.uri, blob.len())
            }
            None => format!("[resource {}]", resource.uri),
        },
        None => "[content this build cannot show]".to_owned(),
    }
}

/// The text of `parts` for a text-only reader (`ToolResult.output`): each
/// part's [`describe`] line, in order.
pub fn text_of(parts: &[ContentPart]) -> String {
    parts.iter().map(describe).collect::<Vec<_>>().join("\n")
}

/// Puts `note` in front of what the model reads: the output, and the parts
/// when the result has them (an MCP client shows the parts).
pub fn prepend_note(result: &mut ToolResult, note: &str) {
    result.output = format!("{note}\n{}", result.output);
    if !result.parts.is_empty() {
        result.parts.insert(0, text(note));
    }
}

/// Whether `parts` say nothing text does not: text parts alone (then
/// `output` carries the result, and no parts are kept).
pub fn only_text(parts: &[ContentPart]) -> bool {
    parts.iter().all(|p| {
        matches!(p.part, Some(Part::Text(_))) && p.annotations.is_empty() && p.meta.is_empty()
    })
}

/// An MCP content block (the JSON of `tools/call`'s `content`) as a part.
pub fn from_mcp(block: &Value) -> Result<ContentPart, ContentError> {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
    let str_of = |kind: &'static str, field: &'static str| {
        block
            .get(field)
            .and_then(Value::as_str)
            .ok_or(ContentError::Missing { kind, field })
    };
    let opt = |object: &Value, field: &str| -> String {
        object
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let decoded = |kind: &'static str, field: &'static str, text: &str| {
        STANDARD.decode(text).map_err(|e| ContentError::NotBase64 {
            kind,
            field,
            reason: e.to_string(),
        })
    };
    let media = |kind: &'static str| -> Result<Media, ContentError> {
        Ok(Media {
            data: decoded(kind, "data", str_of(kind, "data")?)?,
            mime_type: str_of(kind, "mimeType")?.to_owned(),
        })
    };
    let found = match kind {
        "text" => Part::Text(str_of("text", "text")?.to_owned()),
        "image" => Part::Image(media("image")?),
        "audio" => Part::Audio(media("audio")?),
        "resource_link" => Part::ResourceLink(ResourceLink {
            uri: str_of("resource_link", "uri")?.to_owned(),
            name: opt(block, "name"),
            title: opt(block, "title"),
            description: opt(block, "description"),
            mime_type: opt(block, "mimeType"),
            size: block.get("size").and_then(Value::as_u64),
            icons: json_text(block.get("icons")),
        }),
        "resource" => {
            let resource = block.get("resource").ok_or(ContentError::Missing {
                kind: "resource",
                field: "resource",
            })?;
            let uri = resource
                .get("uri")
                .and_then(Value::as_str)
                .ok_or(ContentError::Missing {
                    kind: "resource",
                    field: "uri",
                })?;
            let contents = match (resource.get("text"), resource.get("blob")) {
                (Some(Value::String(text)), _) => Contents::Text(text.clone()),
                (_, Some(Value::String(blob))) => {
                    Contents::Blob(decoded("resource", "blob", blob)?)
                }
                _ => {
                    return Err(ContentError::Missing {
                        kind: "resource",
                        field: "text",
                    });
                }
            };
            Part::Resource(EmbeddedResource {
                uri: uri.to_owned(),
                mime_type: opt(resource, "mimeType"),
                contents: Some(contents),
                meta: json_text(resource.get("_meta")),
            })
        }
        other => return Err(ContentError::UnknownType(other.to_owned())),
    };
    Ok(ContentPart {
        part: Some(found),
        annotations: json_text(block.get("annotations")),
        meta: json_text(block.get("_meta")),
    })
}

/// `part` as an MCP content block (the JSON `tools/call` answers with);
/// none for a part this build does not know.
pub fn to_mcp(part: &ContentPart) -> Option<Value> {
    let mut block = match part.part.as_ref()? {
        Part::Text(text) => json!({"type": "text", "text": text}),
        Part::Image(media) => {
            json!({"type": "image", "data": STANDARD.encode(&media.data), "mimeType": media.mime_type})
        }
        Part::Audio(media) => {
            json!({"type": "audio", "data": STANDARD.encode(&media.data), "mimeType": media.mime_type})
        }
        Part::ResourceLink(link) => {
            let mut block = Map::new();
            block.insert("type".into(), json!("resource_link"));
            block.insert("uri".into(), json!(link.uri));
            block.insert("name".into(), json!(link.name));
            put_text(&mut block, "title", &link.title);
            put_text(&mut block, "description", &link.description);
            put_text(&mut block, "mimeType", &link.mime_type);
            if let Some(size) = link.size {
                block.insert("size".into(), json!(size));
            }
            put_json(&mut block, "icons", &link.icons);
            Value::Object(block)
        }
        Part::Resource(resource) => {
            let mut contents = Map::new();
            contents.insert("uri".into(), json!(resource.uri));
            put_text(&mut contents, "mimeType", &resource.mime_type);
            match &resource.contents {
                Some(Contents::Text(text)) => contents.insert("text".into(), json!(text)),
                Some(Contents::Blob(blob)) => {
                    contents.insert("blob".into(), json!(STANDARD.encode(blob)))
                }
                None => contents.insert("text".into(), json!("")),
            };
            put_json(&mut contents, "_meta", &resource.meta);
            json!({"type": "resource", "resource": contents})
        }
    };
    if let Value::Object(block) = &mut block {
        put_json(block, "annotations", &part.annotations);
        put_json(block, "_meta", &part.meta);
    }
    Some(block)
}

/// A JSON value as text; empty for none.
fn json_text(value: Option<&Value>) -> String {
    value
        .filter(|v| !v.is_null())
        .map(Value::to_string)
        .unwrap_or_default()
}

fn put_text(object: &mut Map<String, Value>, key: &str, text: &str) {
    if !text.is_empty() {
        object.insert(key.into(), json!(text));
    }
}

/// Puts the JSON `text` holds under `key` (nothing for empty or bad text).
fn put_json(object: &mut Map<String, Value>, key: &str, text: &str) {
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        object.insert(key.into(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every MCP block type survives the trip to a part and back, with its
    /// annotations and `_meta`; binary data travels as bytes.
    #[test]
    fn mcp_blocks_round_trip() {
        let blocks = [
            json!({"type": "text", "text": "hello"}),
            json!({"type": "image", "data": "aGVsbG8=", "mimeType": "image/png",
                   "annotations": {"audience": ["user"], "priority": 0.5}}),
            json!({"type": "audio", "data": "AAEC", "mimeType": "audio/wav", "_meta": {"k": 1}}),
            json!({"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt",
                   "mimeType": "text/plain", "size": 12, "description": "the file"}),
            json!({"type": "resource", "resource": {"uri": "mem://x", "mimeType": "text/plain", "text": "inside"}}),
            json!({"type": "resource", "resource": {"uri": "mem://y", "blob": "AAEC"}}),
        ];
        for block in &blocks {
            let part = from_mcp(block).unwrap();
            assert_eq!(to_mcp(&part).as_ref(), Some(block), "{part:?}");
        }
        let image = from_mcp(&blocks[1]).unwrap();
        assert_eq!(
            image.part,
            Some(Part::Image(Media {
                data: b"hello".to_vec(),
                mime_type: "image/png".into()
            }))
        );
        let parts: Vec<ContentPart> = blocks.iter().map(|b| from_mcp(b).unwrap()).collect();
        assert_eq!(
            text_of(&parts),
            "hello\n[image image/png, 5 bytes]\n[audio audio/wav, 3 bytes]\n\
             [resource link file:///a.txt (a.txt), text/plain]\ninside\n[resource mem://y, 3 bytes]"
        );
        assert!(!only_text(&parts));
        assert!(only_text(&parts[..1]));
    }

    /// A block a tool result cannot carry, or with data that is not base64,
    /// is refused saying which.
    #[test]
    fn bad_blocks_are_named() {
        let unknown = from_mcp(&json!({"type": "tool_use"})).unwrap_err();
        assert_eq!(unknown, ContentError::UnknownType("tool_use".into()));
        let bad = from_mcp(&json!({"type": "image", "data": "%%", "mimeType": "image/png"}));
        assert!(
            matches!(bad, Err(ContentError::NotBase64 { .. })),
            "{bad:?}"
        );
        let missing = from_mcp(&json!({"type": "image", "data": "AAEC"})).unwrap_err();
        assert!(missing.to_string().contains("mimeType"), "{missing}");
    }

    /// A note goes in front of the output and, when there are parts, of
    /// the parts too.
    #[test]
    fn notes_precede_both() {
        let mut result = ToolResult {
            output: "x\n[image image/png, 1 bytes]".into(),
            parts: vec![text("x"), image(vec![1], "image/png")],
            ..ToolResult::default()
        };
        prepend_note(&mut result, "[note]");
        assert!(result.output.starts_with("[note]\nx"));
        assert_eq!(describe(&result.parts[0]), "[note]");
        let mut plain = ToolResult {
            output: "y".into(),
            ..ToolResult::default()
        };
        prepend_note(&mut plain, "[note]");
        assert!(plain.parts.is_empty());
    }
}

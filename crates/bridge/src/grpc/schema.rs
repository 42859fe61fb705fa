//! JSON Schemas of protobuf messages as the proto3 JSON mapping writes them: lowerCamelCase names, 64-bit integers as strings, enums by name, each `oneof` as alternatives, the well-known types in their JSON forms, and recursion cut at a depth bound.

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use prost_types::FileDescriptorProto;
use serde_json::{Map, Value, json};

/// How many times one message may appear inside itself before the schema
/// stops describing it (any object is then accepted there).
const RECURSION_BOUND: usize = 2;
/// Deepest nesting of messages described: past it, any object.
const NESTING_BOUND: usize = 6;

/// The schema of `message` as a JSON object (a tool's input or output).
pub(crate) fn message_schema(message: &MessageDescriptor) -> Value {
    Describer::default().message(message)
}

/// The comments written above the element at `path` of `file`, when the
/// descriptors carry source info (many servers strip it).
pub(crate) fn comments(file: &FileDescriptorProto, path: &[i32]) -> Option<String> {
    let info = file.source_code_info.as_ref()?;
    let location = info.location.iter().find(|l| l.path == path)?;
    let text = location
        .leading_comments
        .as_deref()
        .or(location.trailing_comments.as_deref())?;
    let text = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    (!text.is_empty()).then_some(text)
}

/// Walks messages, remembering which ones it is inside.
#[derive(Default)]
struct Describer {
    within: Vec<String>,
}

impl Describer {
    fn message(&mut self, message: &MessageDescriptor) -> Value {
        if let Some(known) = well_known(message.full_name()) {
            return known;
        }
        let name = message.full_name().to_owned();
        let repeats = self.within.iter().filter(|n| **n == name).count();
        if repeats >= RECURSION_BOUND || self.within.len() >= NESTING_BOUND {
            return json!({
                "type": "object",
                "description": format!("A {name} (nested deeper than this schema describes it).")
            });
        }
        self.within.push(name);
        let file = message.parent_file_descriptor_proto().clone();
        let mut properties = Map::new();
        for field in message.fields() {
            let mut schema = self.field(&field);
            if let (Some(text), Value::Object(object)) =
                (comments(&file, field.path()), &mut schema)
            {
                object
                    .entry("description")
                    .or_insert_with(|| Value::String(text));
            }
            properties.insert(field.json_name().to_owned(), schema);
        }
        let mut schema = json!({
            "type": "object",
            "properties": properties,
            "additionalProperties": false,
        });
        let alternatives: Vec<Value> = message
            .oneofs()
            .filter(|oneof| !oneof.is_synthetic())
            .map(|oneof| {
                let names: Vec<String> = oneof.fields().map(|f| f.json_name().to_owned()).collect();
                let mut options: Vec<Value> = names
                    .iter()
                    .map(|name| json!({"required": [name]}))
                    .collect();
                // Or none of them.
                options.push(json!({"not": {"anyOf": options.clone()}}));
                json!({"oneOf": options})
            })
            .collect();
        if !alternatives.is_empty() {
            schema["allOf"] = Value::Array(alternatives);
        }
        if let Some(text) = comments(&file, message.path()) {
            schema["description"] = Value::String(text);
        }
        self.within.pop();
        schema
    }

    fn field(&mut self, field: &FieldDescriptor) -> Value {
        if field.is_map() {
            let Kind::Message(entry) = field.kind() else {
                return json!({"type": "object"});
            };
            let value = self.kind(&entry.map_entry_value_field().kind());
            return json!({"type": "object", "additionalProperties": value});
        }
        let single = self.kind(&field.kind());
        if field.is_list() {
            json!({"type": "array", "items": single})
        } else {
            single
        }
    }

    fn kind(&mut self, kind: &Kind) -> Value {
        match kind {
            Kind::Double | Kind::Float => json!({"type": "number"}),
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
                json!({"type": "integer", "minimum": i32::MIN, "maximum": i32::MAX})
            }
            Kind::Uint32 | Kind::Fixed32 => {
                json!({"type": "integer", "minimum": 0, "maximum": u32::MAX})
            }
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => json!({
                "type": "string",
                "format": "int64",
                "description": "A 64-bit integer written as a decimal string, e.g. \"-42\"."
            }),
            Kind::Uint64 | Kind::Fixed64 => json!({
                "type": "string",
                "format": "uint64",
                "description": "An unsigned 64-bit integer written as a decimal string, e.g. \"42\"."
            }),
            Kind::Bool => json!({"type": "boolean"}),
            Kind::String => json!({"type": "string"}),
            Kind::Bytes => json!({"type": "string", "contentEncoding": "base64"}),
            Kind::Enum(descriptor) => {
                if descriptor.full_name() == "google.protobuf.NullValue" {
                    return json!({"type": "null"});
                }
                let names: Vec<String> = descriptor.values().map(|v| v.name().to_owned()).collect();
                json!({"type": "string", "enum": names})
            }
            Kind::Message(message) => self.message(message),
        }
    }
}

/// The JSON forms of the well-known types.
fn well_known(full_name: &str) -> Option<Value> {
    let integer64 = |what: &str| json!({"type": "string", "description": format!("{what} written as a decimal string.")});
    Some(match full_name {
        "google.protobuf.Timestamp" => json!({
            "type": "string",
            "format": "date-time",
            "description": "An RFC 3339 time in UTC, e.g. \"2026-01-02T15:04:05Z\"."
        }),
        "google.protobuf.Duration" => json!({
            "type": "string",
            "description": "A duration in seconds with an \"s\" suffix, e.g. \"1.5s\"."
        }),
        "google.protobuf.Struct" => json!({"type": "object"}),
        "google.protobuf.Value" => json!({}),
        "google.protobuf.ListValue" => json!({"type": "array"}),
        "google.protobuf.Empty" => {
            json!({"type": "object", "properties": {}, "additionalProperties": false})
        }
        "google.protobuf.FieldMask" => json!({
            "type": "string",
            "description": "Field paths in lowerCamelCase separated by commas, e.g. \"title,author.name\"."
        }),
        "google.protobuf.Any" => json!({
            "type": "object",
            "properties": {"@type": {"type": "string"}},
            "required": ["@type"]
        }),
        "google.protobuf.DoubleValue" | "google.protobuf.FloatValue" => {
            json!({"type": ["number", "null"]})
        }
        "google.protobuf.Int32Value" | "google.protobuf.UInt32Value" => {
            json!({"type": ["integer", "null"]})
        }
        "google.protobuf.Int64Value" => integer64("A 64-bit integer"),
        "google.protobuf.UInt64Value" => integer64("An unsigned 64-bit integer"),
        "google.protobuf.BoolValue" => json!({"type": ["boolean", "null"]}),
        "google.protobuf.StringValue" => json!({"type": ["string", "null"]}),
        "google.protobuf.BytesValue" => {
            json!({"type": ["string", "null"], "contentEncoding": "base64"})
        }
        _ => return None,
    })
}

//! The Berkeley Function Calling Leaderboard as read from its package's
//! `bfcl_eval/data`: the function definitions of every category pooled into
//! one catalog of tool specs, and the questions of one category with the
//! functions their answers call.

use crate::error::BenchError;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use toolmesh::pb::ToolSpec;
use toolmesh::spec::MAX_NAME_CHARS;

/// One function as BFCL defines it (its `parameters` are JSON Schema with
/// Python-, Java- and JavaScript-flavoured type names).
#[derive(Debug, Clone, Deserialize)]
pub struct BfclFunction {
    /// As the answers name it (dots allowed: `math.factorial`).
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// Its parameters.
    #[serde(default)]
    pub parameters: Value,
}

/// A BFCL function as a tool of the mesh.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    /// The spec registered.
    pub spec: ToolSpec,
}

/// `function` as a tool spec named `name` (see [`mesh_name`]): its
/// description (the name's words when it has none) and its parameters as
/// the input schema, BFCL's type names mapped to JSON Schema's and types
/// JSON Schema has no name for left open.
pub fn to_spec(function: &BfclFunction, name: String) -> Converted {
    let description = match function.description.trim() {
        "" => format!("{}.", function.name),
        text => text.to_owned(),
    };
    let mut schema = json_schema(&function.parameters);
    if let Some(object) = schema.as_object_mut() {
        object.insert("type".into(), "object".into());
    } else {
        schema = json!({"type": "object"});
    }
    Converted {
        spec: ToolSpec {
            name,
            version: "1.0.0".into(),
            description,
            input_schema: schema.to_string(),
            ..ToolSpec::default()
        },
    }
}

/// `name` under the mesh's naming rule (`^[A-Za-z][A-Za-z0-9_-]{0,63}$`):
/// every other character (BFCL's dots) becomes `_`, a name not starting
/// with a letter gains an `f_`, and it is cut at the longest name allowed.
pub fn mesh_name(name: &str) -> String {
    let mut mapped: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !mapped.starts_with(|c: char| c.is_ascii_alphabetic()) {
        mapped.insert_str(0, "f_");
    }
    mapped.truncate(MAX_NAME_CHARS);
    mapped
}

/// `schema` with BFCL's type names mapped, at any depth.
fn json_schema(schema: &Value) -> Value {
    let Some(object) = schema.as_object() else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in object {
        let value = match key.as_str() {
            "type" => match value.as_str().and_then(json_type) {
                Some(mapped) => Value::from(mapped),
                // A type JSON Schema cannot name (`any`, a Java class):
                // any value.
                None => continue,
            },
            "properties" => match value.as_object() {
                Some(properties) => Value::Object(
                    properties
                        .iter()
                        .map(|(name, property)| (name.clone(), json_schema(property)))
                        .collect(),
                ),
                None => continue,
            },
            "items" | "additionalProperties" => json_schema(value),
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    Value::Object(out)
}

/// The JSON Schema type a BFCL type name means, if one does.
fn json_type(name: &str) -> Option<&'static str> {
    Some(match name.to_ascii_lowercase().as_str() {
        "dict" | "object" | "hashmap" | "map" => "object",
        "array" | "tuple" | "list" | "arraylist" => "array",
        "string" | "char" | "str" => "string",
        "integer" | "int" | "long" | "short" | "byte" => "integer",
        "number" | "float" | "double" | "bigdecimal" => "number",
        "boolean" | "bool" => "boolean",
        "null" => "null",
        _ => return None,
    })
}

/// Every function of every category, one tool per distinct BFCL name (its
/// first definition in file order), and the mesh name of each.
#[derive(Debug)]
pub(crate) struct Catalog {
    /// In file order.
    pub(crate) tools: Vec<Converted>,
    /// BFCL name → mesh name.
    pub(crate) names: HashMap<String, String>,
}

/// One question line of a category file (the fields read).
#[derive(Deserialize)]
struct QuestionLine {
    id: String,
    #[serde(default)]
    question: Vec<Vec<Message>>,
    #[serde(default)]
    function: Vec<BfclFunction>,
}

/// One chat message.
#[derive(Deserialize)]
struct Message {
    role: String,
    content: String,
}

/// One answer line: the calls expected, each `{function: {arguments}}`.
#[derive(Deserialize)]
struct AnswerLine {
    id: String,
    ground_truth: Vec<BTreeMap<String, Value>>,
}

impl Catalog {
    /// The functions of every `BFCL_v4_*.json` under `data` (lines that
    /// are not a question with functions are passed over: some files hold
    /// other shapes).
    pub(crate) fn pooled(data: &Path) -> Result<Catalog, BenchError> {
        let mut files: Vec<_> = std::fs::read_dir(data)
            .map_err(|e| BenchError::io(format!("read {}", data.display()), e))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| {
                path.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("BFCL_v4_") && n.ends_with(".json"))
            })
            .collect();
        files.sort();
        let mut catalog = Catalog {
            tools: Vec::new(),
            names: HashMap::new(),
        };
        let mut taken = HashSet::new();
        for file in files {
            for line in read(&file)?.lines() {
                let Ok(question) = serde_json::from_str::<QuestionLine>(line) else {
                    continue;
                };
                for function in question.function {
                    if catalog.names.contains_key(&function.name) {
                        continue;
                    }
                    let name = unique(mesh_name(&function.name), &taken);
                    taken.insert(name.clone());
                    catalog.names.insert(function.name.clone(), name.clone());
                    catalog.tools.push(to_spec(&function, name));
                }
            }
        }
        Ok(catalog)
    }
}

/// `name`, or `name_2`, `name_3`… (cut to fit) when another function
/// took it.
fn unique(name: String, taken: &HashSet<String>) -> String {
    if !taken.contains(&name) {
        return name;
    }
    (2..)
        .map(|n| {
            let suffix = format!("_{n}");
            let mut cut = name.clone();
            cut.truncate(MAX_NAME_CHARS - suffix.len());
            cut + &suffix
        })
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or(name)
}

/// One question and the functions (BFCL names) its answer calls.
#[derive(Debug, Clone)]
pub(crate) struct Question {
    /// The user's words of its first turn.
    pub(crate) text: String,
    /// Distinct, in answer order.
    pub(crate) truth: Vec<String>,
}

/// The questions of `category` (`simple_python`, `live_multiple`, …)
/// that have an answer.
pub(crate) fn questions(data: &Path, category: &str) -> Result<Vec<Question>, BenchError> {
    let asked = read(&data.join(format!("BFCL_v4_{category}.json")))?;
    let answers = read(&data.join(format!("possible_answer/BFCL_v4_{category}.json")))?;
    let mut truths = HashMap::new();
    for line in answers.lines().filter(|l| !l.trim().is_empty()) {
        let answer: AnswerLine = serde_json::from_str(line).map_err(|e| {
            BenchError::failed(format!("read an answer of {category}"), e.to_string())
        })?;
        let mut truth: Vec<String> = Vec::new();
        for call in answer.ground_truth {
            for function in call.into_keys() {
                if !truth.contains(&function) {
                    truth.push(function);
                }
            }
        }
        truths.insert(answer.id, truth);
    }
    let mut questions = Vec::new();
    for line in asked.lines().filter(|l| !l.trim().is_empty()) {
        let question: QuestionLine = serde_json::from_str(line).map_err(|e| {
            BenchError::failed(format!("read a question of {category}"), e.to_string())
        })?;
        let Some(truth) = truths.remove(&question.id).filter(|t| !t.is_empty()) else {
            continue;
        };
        let text = question
            .question
            .first()
            .map(|turn| {
                turn.iter()
                    .filter(|m| m.role == "user")
                    .map(|m| m.content.as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        questions.push(Question { text, truth });
    }
    Ok(questions)
}

fn read(path: &Path) -> Result<String, BenchError> {
    std::fs::read_to_string(path).map_err(|e| BenchError::io(format!("read {}", path.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolmesh::ToolDef;

    /// A BFCL function becomes a valid tool: dots mapped under the naming
    /// rule, BFCL's type names as JSON Schema's at any depth, types with no
    /// JSON Schema name left open, the description kept.
    #[test]
    fn converts_a_function() {
        let function: BfclFunction = serde_json::from_value(json!({
            "name": "math.factorial",
            "description": "Calculate the factorial of a given number.",
            "parameters": {"type": "dict", "properties": {
                "number": {"type": "integer", "description": "The number."},
                "ratio": {"type": "float"},
                "pair": {"type": "tuple", "items": {"type": "String"}},
                "options": {"type": "dict", "properties": {"strict": {"type": "Boolean"}}},
                "handle": {"type": "any", "description": "Anything."}
            }, "required": ["number"]}
        }))
        .unwrap();
        let converted = to_spec(&function, mesh_name(&function.name));
        let def = ToolDef::new(converted.spec.clone()).unwrap();
        assert_eq!(def.name(), "math_factorial");
        assert_eq!(def.spec().description, function.description);
        let schema: Value = serde_json::from_str(&converted.spec.input_schema).unwrap();
        assert_eq!(
            schema,
            json!({"type": "object", "properties": {
                "number": {"type": "integer", "description": "The number."},
                "ratio": {"type": "number"},
                "pair": {"type": "array", "items": {"type": "string"}},
                "options": {"type": "object", "properties": {"strict": {"type": "boolean"}}},
                "handle": {"description": "Anything."}
            }, "required": ["number"]})
        );
    }

    /// Names outside the rule are mapped, and two that map alike stay apart.
    #[test]
    fn names_under_the_rule() {
        assert_eq!(mesh_name("kb.search-v2"), "kb_search-v2");
        assert_eq!(mesh_name("2d.area"), "f_2d_area");
        assert_eq!(mesh_name(&"a".repeat(80)).len(), MAX_NAME_CHARS);
        let taken = HashSet::from(["math_pi".to_owned()]);
        assert_eq!(unique("math_pi".into(), &taken), "math_pi_2");
        assert_eq!(unique("other".into(), &taken), "other");
        let empty: BfclFunction =
            serde_json::from_value(json!({"name": "noop", "parameters": {}})).unwrap();
        let def = ToolDef::new(to_spec(&empty, "noop".into()).spec).unwrap();
        assert_eq!(def.spec().description, "noop.");
    }
}

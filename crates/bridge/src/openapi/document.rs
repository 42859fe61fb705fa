//! An OpenAPI 3.0 or 3.1 document (JSON or YAML) read as it is written: its operations, each with its path, query and header parameters, JSON request body and 2xx JSON response, and their schemas with every local `$ref` gathered under `$defs` (recursion included) and 3.0's `nullable` and boolean exclusive bounds written as JSON Schema.
//!
//! Why `serde_json::Value` rather than a typed OpenAPI crate: `oas3`
//! refuses any document that is not 3.1 and reads `exclusiveMinimum` as a
//! number (3.0's boolean fails it), `openapiv3` reads 3.0 schemas only (3.1's
//! type arrays fail it), and both parse schemas into structs, so a tool's
//! schema rebuilt from them loses the keywords they do not model. The bridge
//! needs a small part of the document and every keyword of its schemas.

use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};
use toolmesh::pb::RiskLevel;
use toolmesh::spec::MAX_NAME_CHARS;

/// The HTTP methods whose operations become tools; `options` and `trace`
/// describe the protocol, not the API.
const METHODS: [&str; 6] = ["get", "head", "put", "post", "delete", "patch"];
/// The document's extension that says whether an operation may be retried.
pub(crate) const IDEMPOTENT_EXTENSION: &str = "x-idempotent";
/// Parameter headers the specification says to ignore: the bridge sets them.
const IGNORED_HEADERS: [&str; 3] = ["accept", "content-type", "authorization"];
/// Keywords whose values are data, not schemas: never rewritten.
const DATA_KEYWORDS: [&str; 5] = ["example", "examples", "default", "enum", "const"];
/// Keywords whose values map names to schemas (a property may be called
/// `default` or `example`).
const NAMED_SCHEMAS: [&str; 5] = [
    "properties",
    "patternProperties",
    "dependentSchemas",
    "$defs",
    "definitions",
];

/// Why a document cannot be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DocumentError {
    /// Neither JSON nor YAML.
    #[error("it is neither JSON nor YAML ({0})")]
    Syntax(String),
    /// Not an OpenAPI 3 document.
    #[error("it is not an OpenAPI 3.0 or 3.1 document ({0})")]
    NotOpenApi(String),
}

/// The parts of a document the bridge uses.
#[derive(Debug, Clone)]
pub(crate) struct Document {
    /// `info.title`.
    pub(crate) title: String,
    /// `info.version`.
    pub(crate) version: String,
    /// The first `servers[].url`, its variables at their defaults.
    pub(crate) server: Option<String>,
    /// Every operation that can be a tool.
    pub(crate) operations: Vec<Operation>,
    /// Operations left out, each with why.
    pub(crate) left_out: Vec<(String, String)>,
}

/// Where a parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Location {
    Path,
    Query,
    Header,
}

impl Location {
    fn word(self) -> &'static str {
        match self {
            Location::Path => "path",
            Location::Query => "query",
            Location::Header => "header",
        }
    }
}

/// One parameter of an operation.
#[derive(Debug, Clone)]
pub(crate) struct Parameter {
    /// Its name in the request.
    pub(crate) name: String,
    pub(crate) location: Location,
    /// The argument that holds it (its name, unless two locations share it).
    pub(crate) key: String,
    /// Written as JSON text (a parameter described by `content`).
    pub(crate) as_json: bool,
}

/// The JSON request body of an operation.
#[derive(Debug, Clone)]
pub(crate) struct Body {
    /// The argument that holds it.
    pub(crate) key: String,
    /// The media type sent (`application/json` or another `+json`).
    pub(crate) media_type: String,
}

/// One operation as a tool would call it.
#[derive(Debug, Clone)]
pub(crate) struct Operation {
    /// Its `operationId`, else its method and path as a name.
    pub(crate) id: String,
    /// Upper case (`GET`).
    pub(crate) method: String,
    /// The path template (`/books/{book_id}`).
    pub(crate) path: String,
    pub(crate) description: String,
    pub(crate) parameters: Vec<Parameter>,
    pub(crate) body: Option<Body>,
    pub(crate) input_schema: Value,
    pub(crate) output_schema: Option<Value>,
    pub(crate) read_only: bool,
    pub(crate) idempotent: bool,
    pub(crate) risk: RiskLevel,
}

/// Reads `text` as JSON, else as YAML.
pub(crate) fn parse(text: &str) -> Result<Document, DocumentError> {
    let root: Value = match serde_json::from_str(text) {
        Ok(root) => root,
        Err(json) => {
            let yaml: serde_yaml::Value = serde_yaml::from_str(text)
                .map_err(|yaml| DocumentError::Syntax(format!("JSON: {json}; YAML: {yaml}")))?;
            from_yaml(yaml)
        }
    };
    read(&root)
}

/// A YAML value as JSON: keys that are numbers (`200:` of `responses`)
/// or booleans become their text.
fn from_yaml(value: serde_yaml::Value) -> Value {
    use serde_yaml::Value as Y;
    match value {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => serde_json::to_value(&n).unwrap_or(Value::Null),
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => Value::Array(items.into_iter().map(from_yaml).collect()),
        Y::Mapping(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let key = match from_yaml(k) {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    (key, from_yaml(v))
                })
                .collect(),
        ),
        Y::Tagged(tagged) => from_yaml(tagged.value),
    }
}

fn read(root: &Value) -> Result<Document, DocumentError> {
    let version = root.get("openapi").and_then(Value::as_str).unwrap_or("");
    if !(version.starts_with("3.0") || version.starts_with("3.1")) {
        let said = if version.is_empty() {
            match root.get("swagger") {
                Some(v) => format!("Swagger {v}"),
                None => "no `openapi` field".to_owned(),
            }
        } else {
            format!("openapi {version}")
        };
        return Err(DocumentError::NotOpenApi(said));
    }
    let info = root.get("info");
    let text = |key: &str| {
        info.and_then(|i| i.get(key))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let mut document = Document {
        title: text("title"),
        version: text("version"),
        server: first_server(root),
        operations: Vec::new(),
        left_out: Vec::new(),
    };
    let Some(paths) = root.get("paths").and_then(Value::as_object) else {
        return Ok(document);
    };
    for (path, item) in paths {
        let item = resolve(root, item);
        for method in METHODS {
            let Some(operation) = item.get(method) else {
                continue;
            };
            match operation_of(root, path, method, item, operation) {
                Ok(operation) => document.operations.push(operation),
                Err(why) => document
                    .left_out
                    .push((format!("{} {path}", method.to_ascii_uppercase()), why)),
            }
        }
    }
    Ok(document)
}

/// The first server's URL with its variables at their defaults.
fn first_server(root: &Value) -> Option<String> {
    let server = root.get("servers")?.as_array()?.first()?;
    let mut url = server.get("url")?.as_str()?.to_owned();
    if let Some(variables) = server.get("variables").and_then(Value::as_object) {
        for (name, variable) in variables {
            if let Some(default) = variable.get("default").and_then(Value::as_str) {
                url = url.replace(&format!("{{{name}}}"), default);
            }
        }
    }
    Some(url)
}

/// `value`, or what its `$ref` points to (followed a few times); an
/// unresolvable reference gives `Null`.
fn resolve<'a>(root: &'a Value, value: &'a Value) -> &'a Value {
    let mut current = value;
    for _ in 0..8 {
        match current.get("$ref").and_then(Value::as_str) {
            Some(pointer) => match pointer.strip_prefix('#').and_then(|p| root.pointer(p)) {
                Some(target) => current = target,
                None => return &Value::Null,
            },
            None => return current,
        }
    }
    &Value::Null
}

fn operation_of(
    root: &Value,
    path: &str,
    method: &str,
    item: &Value,
    operation: &Value,
) -> Result<Operation, String> {
    let id = operation
        .get("operationId")
        .and_then(Value::as_str)
        .filter(|id| !id.trim().is_empty())
        .map_or_else(|| derived_name(method, path), str::to_owned);
    let mut schemas = Schemas::new(root);
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut parameters: Vec<Parameter> = Vec::new();
    // Path-level parameters, then the operation's (which win by name and
    // location).
    let mut declared: Vec<&Value> = Vec::new();
    for list in [item.get("parameters"), operation.get("parameters")] {
        for parameter in list.and_then(Value::as_array).into_iter().flatten() {
            let parameter = resolve(root, parameter);
            let same = |other: &&Value| {
                other.get("name") == parameter.get("name") && other.get("in") == parameter.get("in")
            };
            declared.retain(|other| !same(other));
            declared.push(parameter);
        }
    }
    for parameter in declared {
        let Some(name) = parameter.get("name").and_then(Value::as_str) else {
            continue;
        };
        let location = match parameter.get("in").and_then(Value::as_str) {
            Some("path") => Location::Path,
            Some("query") => Location::Query,
            Some("header") if !IGNORED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) => {
                Location::Header
            }
            Some("cookie") if parameter.get("required") == Some(&Value::Bool(true)) => {
                return Err(format!(
                    "it needs the cookie {name:?}, which the bridge does not send"
                ));
            }
            _ => continue,
        };
        let (schema, as_json) = match parameter.get("schema") {
            Some(schema) => (schema.clone(), false),
            None => (
                media_schema(parameter.get("content")).unwrap_or(json!({})),
                true,
            ),
        };
        let mut schema = schemas.rewrite(&schema);
        if let (Some(text), Value::Object(object)) = (parameter.get("description"), &mut schema) {
            object.entry("description").or_insert_with(|| text.clone());
        }
        let key = if properties.contains_key(name) {
            format!("{}_{name}", location.word())
        } else {
            name.to_owned()
        };
        if location == Location::Path || parameter.get("required") == Some(&Value::Bool(true)) {
            required.push(Value::String(key.clone()));
        }
        properties.insert(key.clone(), schema);
        parameters.push(Parameter {
            name: name.to_owned(),
            location,
            key,
            as_json,
        });
    }
    let body = match operation.get("requestBody") {
        None => None,
        Some(body) => {
            let body = resolve(root, body);
            let content = body.get("content").and_then(Value::as_object);
            let json = content.and_then(|c| c.iter().find(|(media, _)| is_json(media)));
            let Some((media_type, media)) = json else {
                let offered: Vec<&str> = content
                    .map(|c| c.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                return Err(format!(
                    "its request body is not JSON ({}), which the bridge does not send",
                    offered.join(", ")
                ));
            };
            let key = if properties.contains_key("body") {
                "request_body".to_owned()
            } else {
                "body".to_owned()
            };
            let schema = schemas.rewrite(media.get("schema").unwrap_or(&json!({})));
            if body.get("required") == Some(&Value::Bool(true)) {
                required.push(Value::String(key.clone()));
            }
            properties.insert(key.clone(), schema);
            Some(Body {
                key,
                media_type: media_type.clone(),
            })
        }
    };
    let mut input_schema = json!({
        "type": "object",
        "properties": properties,
        "additionalProperties": false,
    });
    if !required.is_empty() {
        input_schema["required"] = Value::Array(required);
    }
    let input_schema = schemas.attach(input_schema);
    // The output's definitions apart, so neither schema carries the other's.
    let mut schemas = Schemas::new(root);
    let output_schema = success_schema(root, operation).map(|s| {
        let rewritten = schemas.rewrite(&s);
        schemas.attach(rewritten)
    });
    let safe = matches!(method, "get" | "head");
    let idempotent = match operation.get(IDEMPOTENT_EXTENSION).and_then(Value::as_bool) {
        Some(said) => said,
        None => safe || matches!(method, "put" | "delete"),
    };
    let risk = match method {
        "get" | "head" => RiskLevel::Low,
        "delete" => RiskLevel::High,
        _ => RiskLevel::Medium,
    };
    Ok(Operation {
        id,
        method: method.to_ascii_uppercase(),
        path: path.to_owned(),
        description: describe(operation, method, path),
        parameters,
        body,
        input_schema,
        output_schema,
        read_only: safe,
        idempotent,
        risk,
    })
}

/// Whether `media` is JSON: `application/json`, a `+json` type, or any.
fn is_json(media: &str) -> bool {
    let essence = media.split(';').next().unwrap_or("").trim();
    essence == "application/json" || essence.ends_with("+json") || essence == "*/*"
}

/// The schema of the JSON media type of a `content` map.
fn media_schema(content: Option<&Value>) -> Option<Value> {
    let (_, media) = content?
        .as_object()?
        .iter()
        .find(|(media, _)| is_json(media))?;
    Some(media.get("schema").cloned().unwrap_or(json!({})))
}

/// The schema of what a successful call answers: the JSON schema of the
/// 2xx responses (several: any of them); none when a 2xx response is not
/// JSON (a 204 has no body to check).
fn success_schema(root: &Value, operation: &Value) -> Option<Value> {
    let responses = operation.get("responses")?.as_object()?;
    let mut schemas: Vec<Value> = Vec::new();
    for (status, response) in responses {
        if !(status.starts_with('2') && status.len() == 3) {
            continue;
        }
        let response = resolve(root, response);
        let schema = media_schema(response.get("content"))?;
        if !schemas.contains(&schema) {
            schemas.push(schema);
        }
    }
    match schemas.len() {
        0 => None,
        1 => schemas.pop(),
        _ => Some(json!({"anyOf": schemas})),
    }
}

/// The summary and the description, else a line naming the operation.
fn describe(operation: &Value, method: &str, path: &str) -> String {
    let text = |key: &str| {
        operation
            .get(key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|t| !t.is_empty())
    };
    match (text("summary"), text("description")) {
        (Some(summary), Some(description)) if summary != description => {
            format!("{summary}\n\n{description}")
        }
        (Some(text), _) | (None, Some(text)) => text.to_owned(),
        (None, None) => format!(
            "Calls {} {path} of the HTTP API.",
            method.to_ascii_uppercase()
        ),
    }
}

/// A name for an operation without an `operationId` that the mesh's name
/// rule accepts: the method and the path's words, e.g. `get_books_book_id`.
pub(crate) fn derived_name(method: &str, path: &str) -> String {
    let mut name = method.to_ascii_lowercase();
    for c in path.chars() {
        if c.is_ascii_alphanumeric() {
            name.push(c);
        } else if !name.ends_with('_') {
            name.push('_');
        }
    }
    let name = name.trim_end_matches('_');
    name.chars().take(MAX_NAME_CHARS).collect()
}

/// The schemas of one operation: local references gathered under `$defs`
/// and 3.0's keywords rewritten as JSON Schema.
struct Schemas<'a> {
    root: &'a Value,
    /// Definition name by JSON pointer.
    names: HashMap<String, String>,
    /// Definitions by name, once rewritten.
    defs: BTreeMap<String, Value>,
}

impl<'a> Schemas<'a> {
    fn new(root: &'a Value) -> Self {
        Schemas {
            root,
            names: HashMap::new(),
            defs: BTreeMap::new(),
        }
    }

    /// `schema` with local references pointing into `$defs` (each target
    /// gathered once, so recursive schemas stay finite) and 3.0's
    /// `nullable` and boolean exclusive bounds rewritten.
    fn rewrite(&mut self, schema: &Value) -> Value {
        match schema {
            Value::Object(object) => {
                let mut out = Map::new();
                for (key, value) in object {
                    if let (true, Value::Object(named)) =
                        (NAMED_SCHEMAS.contains(&key.as_str()), value)
                    {
                        // Names, not keywords: each value a schema.
                        let schemas = named
                            .iter()
                            .map(|(name, schema)| (name.clone(), self.rewrite(schema)))
                            .collect();
                        out.insert(key.clone(), Value::Object(schemas));
                    } else if DATA_KEYWORDS.contains(&key.as_str()) {
                        out.insert(key.clone(), value.clone());
                    } else if key == "$ref" {
                        out.insert(key.clone(), self.reference(value));
                    } else {
                        out.insert(key.clone(), self.rewrite(value));
                    }
                }
                from_openapi_30(&mut out);
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(|v| self.rewrite(v)).collect()),
            other => other.clone(),
        }
    }

    /// A `$ref` value: a local one points into `$defs`, its target
    /// gathered; another document's is left as it is.
    fn reference(&mut self, value: &Value) -> Value {
        let Some(pointer) = value.as_str().and_then(|r| r.strip_prefix('#')) else {
            return value.clone();
        };
        if let Some(name) = self.names.get(pointer) {
            return Value::String(format!("#/$defs/{name}"));
        }
        let base = pointer
            .rsplit('/')
            .next()
            .unwrap_or("schema")
            .replace("~1", "/")
            .replace("~0", "~");
        let base: String = base
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let mut name = base.clone();
        let mut n = 1;
        while self.defs.contains_key(&name) {
            n += 1;
            name = format!("{base}_{n}");
        }
        self.names.insert(pointer.to_owned(), name.clone());
        // Reserved before its target is read, so a reference back to it
        // finds the name.
        self.defs.insert(name.clone(), Value::Null);
        let target = self.root.pointer(pointer).cloned().unwrap_or_else(
            || json!({"description": format!("#{pointer} is not in the document.")}),
        );
        let rewritten = self.rewrite(&target);
        self.defs.insert(name.clone(), rewritten);
        Value::String(format!("#/$defs/{name}"))
    }

    /// `schema` with every definition gathered so far under `$defs`.
    fn attach(&self, mut schema: Value) -> Value {
        if !self.defs.is_empty() {
            if let Value::Object(object) = &mut schema {
                object.insert(
                    "$defs".to_owned(),
                    Value::Object(self.defs.clone().into_iter().collect()),
                );
            } else {
                schema = json!({"allOf": [schema], "$defs": self.defs.clone()});
            }
        }
        schema
    }
}

/// 3.0's `nullable: true` as a `null` type, and its boolean
/// `exclusiveMinimum`/`exclusiveMaximum` as the bounds themselves.
fn from_openapi_30(schema: &mut Map<String, Value>) {
    if schema.remove("nullable") == Some(Value::Bool(true)) {
        match schema.get_mut("type") {
            Some(Value::String(kind)) => {
                let kind = std::mem::take(kind);
                schema.insert("type".to_owned(), json!([kind, "null"]));
            }
            Some(Value::Array(kinds)) if !kinds.contains(&json!("null")) => {
                kinds.push(json!("null"));
            }
            Some(_) => {}
            None => {
                let rest = std::mem::take(schema);
                schema.insert("anyOf".to_owned(), json!([rest, {"type": "null"}]));
                return;
            }
        }
        if let Some(Value::Array(values)) = schema.get_mut("enum")
            && !values.contains(&Value::Null)
        {
            values.push(Value::Null);
        }
    }
    for (exclusive, bound) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        if let Some(Value::Bool(flag)) = schema.get(exclusive) {
            let flag = *flag;
            schema.remove(exclusive);
            if flag && let Some(limit) = schema.remove(bound) {
                schema.insert(exclusive.to_owned(), limit);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PETS_30: &str = r##"
openapi: 3.0.3
info: {title: Pets, version: "1.4.0"}
servers:
  - url: "https://{region}.pets.example/v1"
    variables: {region: {default: eu}}
paths:
  /pets/{pet_id}:
    parameters:
      - {name: pet_id, in: path, required: true, schema: {type: integer, minimum: 1}}
    get:
      summary: One pet.
      parameters:
        - {name: X-Trace, in: header, schema: {type: string}}
        - {name: Authorization, in: header, schema: {type: string}}
      responses:
        200:
          description: the pet
          content: {application/json: {schema: {$ref: "#/components/schemas/Pet"}}}
    delete:
      responses: {204: {description: gone}}
  /pets:
    post:
      operationId: addPet
      x-idempotent: true
      requestBody:
        required: true
        content: {application/json: {schema: {$ref: "#/components/schemas/Pet"}}}
      responses: {201: {$ref: "#/components/responses/Created"}}
  /upload:
    put:
      requestBody: {content: {multipart/form-data: {schema: {type: object}}}}
      responses: {200: {description: ok}}
components:
  responses:
    Created:
      description: made
      content: {application/json: {schema: {$ref: "#/components/schemas/Pet"}}}
  schemas:
    Pet:
      type: object
      required: [name]
      properties:
        name: {type: string, maxLength: 20, nullable: true}
        default: {$ref: "#/components/schemas/Pet"}
        weight: {type: number, minimum: 0, exclusiveMinimum: true}
        parent: {$ref: "#/components/schemas/Pet"}
"##;

    fn operation<'a>(document: &'a Document, id: &str) -> &'a Operation {
        document
            .operations
            .iter()
            .find(|o| o.id == id)
            .unwrap_or_else(|| panic!("{id} in {:?}", document.operations))
    }

    /// A 3.0 YAML document: path-level parameters shared, ignored headers
    /// left out, `$ref`s (recursive too) under `$defs`, `nullable` and
    /// boolean bounds rewritten, names derived where no operationId is,
    /// methods' defaults and `x-idempotent`, and a body that is not JSON
    /// named as the reason an operation is left out.
    #[test]
    fn a_3_0_yaml_document() {
        let document = parse(PETS_30).unwrap();
        assert_eq!(
            (document.title.as_str(), document.version.as_str()),
            ("Pets", "1.4.0")
        );
        assert_eq!(
            document.server.as_deref(),
            Some("https://eu.pets.example/v1")
        );
        let get = operation(&document, "get_pets_pet_id");
        assert_eq!(
            (get.method.as_str(), get.path.as_str()),
            ("GET", "/pets/{pet_id}")
        );
        assert_eq!(get.description, "One pet.");
        assert!(get.read_only && get.idempotent && get.risk == RiskLevel::Low);
        let keys: Vec<&str> = get.parameters.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["pet_id", "X-Trace"]);
        assert_eq!(get.input_schema["required"], json!(["pet_id"]));
        assert_eq!(get.input_schema["properties"]["pet_id"]["minimum"], 1);
        let output = get.output_schema.as_ref().unwrap();
        assert_eq!(output["$ref"], "#/$defs/Pet");
        let pet = &output["$defs"]["Pet"];
        assert_eq!(pet["properties"]["name"]["type"], json!(["string", "null"]));
        assert_eq!(pet["properties"]["name"]["maxLength"], 20);
        assert_eq!(pet["properties"]["weight"]["exclusiveMinimum"], 0);
        assert!(pet["properties"]["weight"].get("minimum").is_none());
        assert_eq!(pet["properties"]["parent"]["$ref"], "#/$defs/Pet");
        assert_eq!(
            pet["properties"]["default"]["$ref"], "#/$defs/Pet",
            "a property called default"
        );
        toolmesh::schema::compile(output).expect("the output schema compiles");

        let delete = operation(&document, "delete_pets_pet_id");
        assert!(delete.idempotent && !delete.read_only && delete.risk == RiskLevel::High);
        assert!(delete.output_schema.is_none(), "a 204 has no body");

        let add = operation(&document, "addPet");
        assert!(
            add.idempotent && add.risk == RiskLevel::Medium,
            "x-idempotent"
        );
        assert_eq!(add.body.as_ref().unwrap().key, "body");
        assert_eq!(add.input_schema["required"], json!(["body"]));
        assert_eq!(
            add.input_schema["properties"]["body"]["$ref"],
            "#/$defs/Pet"
        );
        assert_eq!(add.output_schema.as_ref().unwrap()["$ref"], "#/$defs/Pet");
        toolmesh::schema::compile(&add.input_schema).expect("the input schema compiles");

        assert_eq!(document.left_out.len(), 1, "{:?}", document.left_out);
        assert_eq!(document.left_out[0].0, "PUT /upload");
        assert!(document.left_out[0].1.contains("multipart/form-data"));
    }

    /// A 3.1 JSON document keeps its type arrays and constraints; a
    /// parameter and the body named alike get distinct arguments; several
    /// 2xx schemas are alternatives; Swagger 2.0 and other text are refused
    /// saying what they are.
    #[test]
    fn a_3_1_json_document_and_refusals() {
        let document = parse(
            &json!({
                "openapi": "3.1.0",
                "info": {"title": "T", "version": "x"},
                "paths": {"/items/{body}": {"patch": {
                    "operationId": "patch_item",
                    "parameters": [
                        {"name": "body", "in": "path", "required": true, "schema": {"type": "string"}},
                        {"name": "q", "in": "query", "schema": {"type": ["integer", "null"], "maximum": 9}}
                    ],
                    "requestBody": {"content": {"application/merge-patch+json": {"schema": {"type": "object"}}}},
                    "responses": {
                        "200": {"description": "", "content": {"application/json": {"schema": {"type": "object"}}}},
                        "202": {"description": "", "content": {"application/json": {"schema": {"type": "string"}}}}
                    }
                }}}
            })
            .to_string(),
        )
        .unwrap();
        let patch = operation(&document, "patch_item");
        assert!(!patch.idempotent && !patch.read_only && patch.risk == RiskLevel::Medium);
        let body = patch.body.as_ref().unwrap();
        assert_eq!(
            (body.key.as_str(), body.media_type.as_str()),
            ("request_body", "application/merge-patch+json")
        );
        assert_eq!(
            patch.input_schema["properties"]["q"]["type"],
            json!(["integer", "null"])
        );
        assert_eq!(patch.input_schema["properties"]["q"]["maximum"], 9);
        assert_eq!(
            patch.output_schema.as_ref().unwrap()["anyOf"]
                .as_array()
                .unwrap()
                .len(),
            2
        );

        let swagger = parse(r#"{"swagger": "2.0", "paths": {}}"#)
            .unwrap_err()
            .to_string();
        assert!(swagger.contains("Swagger \"2.0\""), "{swagger}");
        assert!(
            parse("{")
                .unwrap_err()
                .to_string()
                .contains("neither JSON nor YAML")
        );
        assert_eq!(derived_name("GET", "/a/{b}.json"), "get_a_b_json");
    }
}

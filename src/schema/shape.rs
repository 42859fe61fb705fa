//! A schema compiled for accepting valid JSON text in one pass, without building a tree.
//!
//! Most tool schemas keep to a few structural keywords (`type`, `properties`,
//! `required`, `items`, `enum`, bounds, local `$ref`s, `anyOf` over distinct
//! types). For those, [`Shape::accepts`] reads argument text once, allocating
//! next to nothing, and says "valid" only when jsonschema would say so of the
//! parsed text and no object repeats a key. Anything it does not model — a
//! keyword it does not know, a number too large to compare exactly — makes it
//! say "not accepted", and the caller runs the full check, which decides and
//! names every violation. So the fast path can only be slower, never wrong.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;

/// A schema, compiled for [`Shape::accepts`].
#[derive(Debug, Clone)]
pub struct Shape {
    nodes: Vec<Node>,
    root: Id,
}

/// Index of a node in [`Shape::nodes`].
type Id = usize;
/// Accepts anything (`true`, `{}`).
const ANY: Id = 0;
/// Accepts nothing (`false`).
const NEVER: Id = 1;

#[derive(Debug, Clone)]
enum Node {
    /// Uses something this check does not model: the full check decides.
    Defer,
    /// `anyOf` / `oneOf` whose alternatives take disjoint JSON types: the
    /// value's type picks the only alternative that can accept it.
    Choice(Vec<Id>),
    /// Keywords checked here.
    Check(Box<Check>),
}

/// The keywords of one schema object; each group applies to its type only.
#[derive(Debug, Clone)]
struct Check {
    types: Types,
    one_of: Option<Vec<Scalar>>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    minimum: Option<f64>,
    maximum: Option<f64>,
    exclusive_minimum: Option<f64>,
    exclusive_maximum: Option<f64>,
    items: Id,
    min_items: Option<u64>,
    max_items: Option<u64>,
    /// Sorted by name, for binary search.
    properties: Vec<(Box<str>, Id)>,
    /// Bit i: `properties[i]` is required.
    required: u64,
    /// Schema of keys not in `properties`.
    additional: Id,
    min_properties: Option<u64>,
    max_properties: Option<u64>,
}

impl Check {
    /// The index of property `name`, if listed.
    fn find(&self, name: &str) -> Option<usize> {
        let properties = &self.properties;
        if properties.len() <= 8 {
            // Few names: comparing equal-length ones beats a binary search.
            return properties.iter().position(|(n, _)| **n == *name);
        }
        properties.binary_search_by(|(n, _)| (**n).cmp(name)).ok()
    }

    fn allowing(types: Types) -> Self {
        Check {
            types,
            one_of: None,
            min_length: None,
            max_length: None,
            minimum: None,
            maximum: None,
            exclusive_minimum: None,
            exclusive_maximum: None,
            items: ANY,
            min_items: None,
            max_items: None,
            properties: Vec::new(),
            required: 0,
            additional: ANY,
            min_properties: None,
            max_properties: None,
        }
    }
}

/// A set of JSON types; a number is INTEGER when it has no fraction, as
/// JSON Schema counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Types(u8);

impl Types {
    const NULL: Types = Types(1);
    const BOOLEAN: Types = Types(2);
    const INTEGER: Types = Types(4);
    const FRACTION: Types = Types(8);
    const STRING: Types = Types(16);
    const ARRAY: Types = Types(32);
    const OBJECT: Types = Types(64);
    const ALL: Types = Types(127);
    const NONE: Types = Types(0);

    fn named(name: &str) -> Option<Types> {
        Some(match name {
            "null" => Types::NULL,
            "boolean" => Types::BOOLEAN,
            "integer" => Types::INTEGER,
            "number" => Types(Types::INTEGER.0 | Types::FRACTION.0),
            "string" => Types::STRING,
            "array" => Types::ARRAY,
            "object" => Types::OBJECT,
            _ => return None,
        })
    }
    fn has(self, kind: Types) -> bool {
        self.0 & kind.0 != 0
    }
}

/// An `enum` or `const` value this check compares.
#[derive(Debug, Clone, PartialEq)]
enum Scalar {
    Null,
    Bool(bool),
    Number(f64),
    Text(Box<str>),
}

/// Keywords that only annotate: they never make a value invalid.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$defs",
    "definitions",
];

/// `format` values jsonschema does not know and so ignores (those serde
/// and schema generators emit for number widths).
const IGNORED_FORMATS: &[&str] = &[
    "int", "int8", "int16", "int32", "int64", "int128", "uint", "uint8", "uint16", "uint32",
    "uint64", "uint128", "float", "double",
];

/// Drafts whose meaning of the modelled keywords is the one checked here.
const DRAFTS: &[&str] = &[
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "http://json-schema.org/draft-07/schema",
    "http://json-schema.org/draft-06/schema",
];

/// Keywords that change how `$ref`s resolve: a schema using them anywhere
/// is left to the full check.
const REFERENCE_SCOPES: &[&str] = &[
    "$id",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$recursiveRef",
    "$recursiveAnchor",
];

/// Integers up to 2^53 convert to `f64` exactly; bigger ones are deferred.
const EXACT: u64 = 1 << 53;

impl Shape {
    /// Compiles `schema`. Never fails: what is not modelled defers.
    pub fn of(schema: &Value) -> Shape {
        let mut compiler = Compiler {
            root: schema,
            nodes: vec![
                Node::Check(Box::new(Check::allowing(Types::ALL))),
                Node::Check(Box::new(Check::allowing(Types::NONE))),
            ],
            refs: HashMap::new(),
        };
        let root = if known_draft(schema) && !scopes_references(schema, true) {
            compiler.node(schema)
        } else {
            compiler.push(Node::Defer)
        };
        Shape {
            nodes: compiler.nodes,
            root,
        }
    }

    /// True when `text` is one JSON document that repeats no key in any
    /// object and that the schema accepts. False says nothing: the full
    /// check decides.
    pub fn accepts(&self, text: &str) -> bool {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        self.accepts_read(&mut deserializer) && deserializer.end().is_ok()
    }

    /// [`Shape::accepts`] of the value `reader` reads, whichever serde
    /// reader that is (the caller checks that nothing trails it).
    pub fn accepts_read<'de, D: de::Deserializer<'de>>(&self, reader: D) -> bool {
        Walk {
            shape: self,
            id: self.root,
        }
        .deserialize(reader)
        .is_ok()
    }

    /// Whether some part of the schema is left to the full check.
    pub fn defers(&self) -> bool {
        self.nodes.iter().any(|n| matches!(n, Node::Defer))
    }
}

fn known_draft(schema: &Value) -> bool {
    match schema.get("$schema") {
        None => true,
        Some(Value::String(uri)) => DRAFTS.contains(&uri.trim_end_matches('#')),
        Some(_) => false,
    }
}

/// Whether any object below `schema` (or `schema` itself, unless it is the
/// root, where `$id` only names the document) changes `$ref` resolution.
fn scopes_references(schema: &Value, root: bool) -> bool {
    match schema {
        Value::Object(map) => {
            map.keys()
                .any(|k| REFERENCE_SCOPES.contains(&k.as_str()) && !(root && k == "$id"))
                || map.values().any(|v| scopes_references(v, false))
        }
        Value::Array(items) => items.iter().any(|v| scopes_references(v, false)),
        _ => false,
    }
}

struct Compiler<'a> {
    root: &'a Value,
    nodes: Vec<Node>,
    /// Nodes of the `$ref`s met so far, so recursive schemas terminate.
    refs: HashMap<&'a str, Id>,
}

impl<'a> Compiler<'a> {
    fn push(&mut self, node: Node) -> Id {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn node(&mut self, schema: &'a Value) -> Id {
        match schema {
            Value::Bool(true) => ANY,
            Value::Bool(false) => NEVER,
            Value::Object(map) => self.object(map).unwrap_or_else(|| self.push(Node::Defer)),
            _ => self.push(Node::Defer),
        }
    }

    /// The node of one schema object; None defers it.
    fn object(&mut self, map: &'a Map<String, Value>) -> Option<Id> {
        let mut check = Check::allowing(Types::ALL);
        let mut reference = None;
        let mut choice = None;
        let mut asserts = false;
        let (mut properties, mut required, mut additional) = (None, None, None);
        for (key, value) in map {
            if key != "$ref" && key != "anyOf" && key != "oneOf" && !ignorable(key, value) {
                asserts = true;
            }
            match key.as_str() {
                "$ref" => reference = Some(value.as_str()?),
                "anyOf" | "oneOf" => {
                    if choice.is_some() {
                        return None;
                    }
                    choice = Some(value.as_array()?);
                }
                "type" => check.types = types(value)?,
                "enum" | "const" if check.one_of.is_some() => return None,
                "enum" => {
                    let values = value.as_array()?.iter().map(scalar);
                    check.one_of = Some(values.collect::<Option<_>>()?);
                }
                "const" => check.one_of = Some(vec![scalar(value)?]),
                "minLength" => check.min_length = Some(value.as_u64()?),
                "maxLength" => check.max_length = Some(value.as_u64()?),
                "minimum" => check.minimum = Some(exact(value)?),
                "maximum" => check.maximum = Some(exact(value)?),
                "exclusiveMinimum" => check.exclusive_minimum = Some(exact(value)?),
                "exclusiveMaximum" => check.exclusive_maximum = Some(exact(value)?),
                "items" if value.is_object() || value.is_boolean() => {
                    check.items = self.node(value);
                }
                "minItems" => check.min_items = Some(value.as_u64()?),
                "maxItems" => check.max_items = Some(value.as_u64()?),
                "minProperties" => check.min_properties = Some(value.as_u64()?),
                "maxProperties" => check.max_properties = Some(value.as_u64()?),
                "properties" => properties = Some(value.as_object()?),
                "required" => required = Some(value.as_array()?),
                "additionalProperties" if value.is_object() || value.is_boolean() => {
                    additional = Some(value);
                }
                _ if ignorable(key, value) => {}
                _ => return None,
            }
        }
        match (reference, choice) {
            (Some(_), Some(_)) => return None,
            // Draft 7 ignores a `$ref`'s siblings, 2019-09 on applies them:
            // only a bare `$ref` means the same everywhere.
            (Some(reference), None) => {
                return if asserts {
                    None
                } else {
                    self.reference(reference)
                };
            }
            (None, Some(alternatives)) => {
                return if asserts {
                    None
                } else {
                    self.choice(alternatives)
                };
            }
            (None, None) => {}
        }
        check.additional = additional.map_or(ANY, |schema| self.node(schema));
        let mut named: Vec<(Box<str>, Id)> = Vec::new();
        for (name, schema) in properties.into_iter().flatten() {
            named.push((name.as_str().into(), self.node(schema)));
        }
        let mut wanted = Vec::new();
        for name in required.into_iter().flatten() {
            let name = name.as_str()?;
            if !named.iter().any(|(n, _)| &**n == name) {
                // Required but not listed: its value meets `additionalProperties`.
                named.push((name.into(), check.additional));
            }
            wanted.push(name);
        }
        if named.len() > 64 {
            return None;
        }
        named.sort_by(|a, b| a.0.cmp(&b.0));
        for name in wanted {
            let i = named.iter().position(|(n, _)| &**n == name)?;
            check.required |= 1 << i;
        }
        check.properties = named;
        Some(self.push(Node::Check(Box::new(check))))
    }

    /// A local `$ref` (`#` or `#/json/pointer`).
    fn reference(&mut self, reference: &'a str) -> Option<Id> {
        if let Some(&id) = self.refs.get(reference) {
            return Some(id);
        }
        let pointer = reference.strip_prefix('#')?;
        if pointer.contains('%') {
            return None;
        }
        let target = self.root.pointer(pointer)?;
        let placeholder = self.push(Node::Defer);
        self.refs.insert(reference, placeholder);
        let compiled = self.node(target);
        self.nodes[placeholder] = self.nodes[compiled].clone();
        Some(placeholder)
    }

    /// Alternatives that take disjoint types; else None.
    fn choice(&mut self, alternatives: &'a [Value]) -> Option<Id> {
        let ids: Vec<Id> = alternatives.iter().map(|a| self.node(a)).collect();
        let mut taken = Types::NONE;
        for &id in &ids {
            let types = match &self.nodes[id] {
                Node::Check(check) => check.types,
                // Not known yet (a recursive `$ref`) or not modelled.
                Node::Defer | Node::Choice(_) => return None,
            };
            if taken.has(types) {
                return None;
            }
            taken = Types(taken.0 | types.0);
        }
        Some(self.push(Node::Choice(ids)))
    }
}

/// Whether `key` never makes a value invalid (with this `value`).
fn ignorable(key: &str, value: &Value) -> bool {
    match key {
        "format" => value.as_str().is_some_and(|f| IGNORED_FORMATS.contains(&f)),
        "uniqueItems" => value == &Value::Bool(false),
        "$schema" | "$id" => true,
        _ => ANNOTATIONS.contains(&key),
    }
}

fn types(value: &Value) -> Option<Types> {
    match value {
        Value::String(name) => Types::named(name),
        Value::Array(names) => names.iter().try_fold(Types::NONE, |all, name| {
            Some(Types(all.0 | Types::named(name.as_str()?)?.0))
        }),
        _ => None,
    }
}

fn scalar(value: &Value) -> Option<Scalar> {
    Some(match value {
        Value::Null => Scalar::Null,
        Value::Bool(b) => Scalar::Bool(*b),
        Value::Number(_) => Scalar::Number(exact(value)?),
        Value::String(s) => Scalar::Text(s.as_str().into()),
        Value::Array(_) | Value::Object(_) => return None,
    })
}

/// A schema number as `f64`, when that is exact.
fn exact(value: &Value) -> Option<f64> {
    let Value::Number(n) = value else {
        return None;
    };
    number(n)
}

fn number(n: &Number) -> Option<f64> {
    match (n.as_u64(), n.as_i64()) {
        (Some(u), _) => (u <= EXACT).then_some(u as f64),
        (None, Some(i)) => (i.unsigned_abs() <= EXACT).then_some(i as f64),
        (None, None) => n.as_f64(),
    }
}

/// Validates one value at `id` while it is read.
#[derive(Clone, Copy)]
struct Walk<'s> {
    shape: &'s Shape,
    id: Id,
}

/// What stops the walk: the full check takes over.
const NOT_ACCEPTED: &str = "not accepted by the fast check";

fn refuse<T, E: de::Error>() -> Result<T, E> {
    Err(E::custom(NOT_ACCEPTED))
}

impl<'s> Walk<'s> {
    /// The checks for a value of JSON type `kind`, if its type is allowed.
    fn check<E: de::Error>(&self, kind: Types) -> Result<&'s Check, E> {
        let nodes = &self.shape.nodes;
        let takes = |id: Id| match &nodes[id] {
            Node::Check(check) if check.types.has(kind) => Some(&**check),
            _ => None,
        };
        let found = match &nodes[self.id] {
            // Alternatives are checks (compiled so): the type picks one.
            Node::Choice(alternatives) => alternatives.iter().find_map(|&a| takes(a)),
            _ => takes(self.id),
        };
        found.ok_or_else(|| E::custom(NOT_ACCEPTED))
    }

    fn number<E: de::Error>(&self, x: f64, kind: Types) -> Result<(), E> {
        let check = self.check(kind)?;
        let below =
            |limit: Option<f64>, out: fn(f64, f64) -> bool| limit.is_some_and(|l| out(x, l));
        if below(check.minimum, |x, l| x < l)
            || below(check.maximum, |x, l| x > l)
            || below(check.exclusive_minimum, |x, l| x <= l)
            || below(check.exclusive_maximum, |x, l| x >= l)
        {
            return refuse();
        }
        one_of(check, &Scalar::Number(x))
    }

    /// An integer, if it converts to `f64` exactly.
    fn integer<E: de::Error>(&self, magnitude: u64, x: f64) -> Result<(), E> {
        if magnitude > EXACT {
            return refuse();
        }
        self.number(x, Types::INTEGER)
    }
}

fn one_of<E: de::Error>(check: &Check, value: &Scalar) -> Result<(), E> {
    match &check.one_of {
        Some(values) if !values.contains(value) => refuse(),
        _ => Ok(()),
    }
}

fn within<E: de::Error>(n: u64, min: Option<u64>, max: Option<u64>) -> Result<(), E> {
    if min.is_some_and(|m| n < m) || max.is_some_and(|m| n > m) {
        return refuse();
    }
    Ok(())
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        one_of(self.check(Types::NULL)?, &Scalar::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        one_of(self.check(Types::BOOLEAN)?, &Scalar::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.integer(v.unsigned_abs(), v as f64)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.integer(v, v as f64)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        if v.fract() == 0.0 {
            // Beyond 2^53 every f64 is whole; leave those to the full check.
            if v.abs() > EXACT as f64 {
                return refuse();
            }
            self.number(v, Types::INTEGER)
        } else {
            self.number(v, Types::FRACTION)
        }
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        let check = self.check(Types::STRING)?;
        if check.min_length.is_some() || check.max_length.is_some() {
            let chars = v.chars().count() as u64;
            within(chars, check.min_length, check.max_length)?;
        }
        match &check.one_of {
            Some(values)
                if !values
                    .iter()
                    .any(|s| matches!(s, Scalar::Text(t) if &**t == v)) =>
            {
                refuse()
            }
            _ => Ok(()),
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let check = self.check(Types::ARRAY)?;
        if check.one_of.is_some() {
            return refuse();
        }
        let item = Walk {
            shape: self.shape,
            id: check.items,
        };
        let mut count = 0u64;
        while seq.next_element_seed(item)?.is_some() {
            count += 1;
        }
        within(count, check.min_items, check.max_items)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let check = self.check(Types::OBJECT)?;
        if check.one_of.is_some() {
            return refuse();
        }
        let mut listed = 0u64;
        let mut others = Keys::default();
        let mut count = 0u64;
        while let Some(Key(key)) = map.next_key()? {
            count += 1;
            let id = match check.find(&key) {
                Some(i) => {
                    if listed & (1 << i) != 0 {
                        return refuse();
                    }
                    listed |= 1 << i;
                    check.properties[i].1
                }
                None => {
                    if !others.insert(key) {
                        return refuse();
                    }
                    check.additional
                }
            };
            map.next_value_seed(Walk {
                shape: self.shape,
                id,
            })?;
        }
        if listed & check.required != check.required {
            return refuse();
        }
        within(count, check.min_properties, check.max_properties)
    }
}

/// An object key, borrowed from the text when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// Keys of one object that its schema does not list, to refuse repeats: a
/// short list, then a hash set (so a hostile object with many keys costs
/// linear time).
#[derive(Default)]
struct Keys<'de> {
    few: Vec<Cow<'de, str>>,
    many: Option<HashSet<Cow<'de, str>>>,
}

impl<'de> Keys<'de> {
    const FEW: usize = 16;

    /// False when `key` was already seen.
    fn insert(&mut self, key: Cow<'de, str>) -> bool {
        if let Some(many) = &mut self.many {
            return many.insert(key);
        }
        if self.few.contains(&key) {
            return false;
        }
        if self.few.len() == Self::FEW {
            let mut many: HashSet<_> = self.few.drain(..).collect();
            many.insert(key);
            self.many = Some(many);
        } else {
            self.few.push(key);
        }
        true
    }
}

#[cfg(test)]
mod tests;

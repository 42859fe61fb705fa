//! What of a tool definition is searched: its fields and their terms.

use crate::analyze;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use toolmesh::ToolDef;

/// A searched field of a tool definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// The tool's name, split into words (`get_user_info`, `getUserInfo`).
    Name,
    /// The input schema's `title`, when it has one.
    Title,
    /// The tool's description.
    Description,
    /// The tool's tags.
    Tags,
    /// The names of its parameters, at any depth of the input schema.
    ParameterNames,
    /// The descriptions (and titles) of its parameters.
    ParameterDescriptions,
    /// The values its parameters name: their `enum` choices and
    /// `default`s, where they are text (`celsius`, `fahrenheit`).
    ParameterValues,
}

/// How many fields there are.
pub const FIELDS: usize = 7;

impl Field {
    /// Every field, in index order.
    pub const ALL: [Field; FIELDS] = [
        Field::Name,
        Field::Title,
        Field::Description,
        Field::Tags,
        Field::ParameterNames,
        Field::ParameterDescriptions,
        Field::ParameterValues,
    ];

    /// Its position in per-field arrays.
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// One definition analyzed: each field's length in terms, and each
/// distinct term's frequency per field.
#[derive(Debug, Default)]
pub(crate) struct Analyzed {
    pub(crate) lengths: [u32; FIELDS],
    pub(crate) frequencies: HashMap<String, [u16; FIELDS]>,
}

impl Analyzed {
    /// The fields of `def`, analyzed.
    pub(crate) fn of(def: &ToolDef) -> Self {
        let mut analyzed = Analyzed::default();
        for (field, text) in Field::ALL.into_iter().zip(field_texts(def)) {
            analyzed.add(field, &text);
        }
        analyzed
    }

    /// Counts `text`'s terms in `field`; a name also holds the pairs of
    /// its adjacent words ([`analyze::pairs`]), which a query's pairs meet
    /// (not counted in its length: they add no words).
    fn add(&mut self, field: Field, text: &str) {
        let terms = analyze::terms(text);
        if field == Field::Name {
            for pair in analyze::pairs(&terms) {
                self.count(field, pair);
            }
        }
        for term in terms {
            self.lengths[field.index()] += 1;
            self.count(field, term);
        }
    }

    fn count(&mut self, field: Field, term: String) {
        let counts = self.frequencies.entry(term).or_default();
        counts[field.index()] = counts[field.index()].saturating_add(1);
    }
}

/// The text of each searched field of `def`, in [`Field::ALL`] order (what
/// the index analyzes; other rankings can be given the same text).
pub fn field_texts(def: &ToolDef) -> [String; FIELDS] {
    let spec = def.spec();
    // Read once without keeping the tree: an index over the whole mesh
    // must not make every definition hold its parsed schema.
    def.read_input_schema(|schema| {
        let mut parameters = Parameters::default();
        parameters.collect(schema);
        let title = schema.get("title").and_then(Value::as_str).unwrap_or("");
        [
            def.name().to_owned(),
            title.to_owned(),
            spec.description.clone(),
            spec.tags.join(" "),
            parameters.names.join(" "),
            parameters.descriptions.join(" "),
            parameters.values.join(" "),
        ]
    })
}

/// The parameter names, descriptions and text values of an input schema.
#[derive(Debug, Default)]
struct Parameters<'s> {
    names: Vec<&'s str>,
    descriptions: Vec<&'s str>,
    values: Vec<&'s str>,
}

impl<'s> Parameters<'s> {
    /// Walks `schema`'s `properties`, nested objects and array items
    /// included.
    fn collect(&mut self, schema: &'s Value) {
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            for (name, property) in properties {
                self.names.push(name);
                for key in ["title", "description"] {
                    if let Some(text) = property.get(key).and_then(Value::as_str) {
                        self.descriptions.push(text);
                    }
                }
                for key in ["enum", "default"] {
                    match property.get(key) {
                        Some(Value::Array(values)) => {
                            self.values.extend(values.iter().filter_map(Value::as_str));
                        }
                        Some(Value::String(value)) => self.values.push(value),
                        _ => {}
                    }
                }
                self.collect(property);
            }
        }
        if let Some(items) = schema.get("items") {
            self.collect(items);
        }
    }
}

/// A definition's number in one index lineage (never reused).
pub(crate) type DocId = u64;

/// One indexed definition.
#[derive(Debug)]
pub(crate) struct Doc {
    pub(crate) id: DocId,
    pub(crate) def: Arc<ToolDef>,
    /// Each field's length in terms.
    pub(crate) lengths: [u32; FIELDS],
    /// Its distinct terms: where its postings are, to remove them.
    pub(crate) terms: Box<[Box<str>]>,
}

impl Doc {
    /// `def` analyzed as definition `id`, with each of its terms'
    /// frequencies per field.
    pub(crate) fn analyzed(
        id: DocId,
        def: Arc<ToolDef>,
    ) -> (Arc<Doc>, HashMap<String, [u16; FIELDS]>) {
        let analyzed = Analyzed::of(&def);
        let doc = Arc::new(Doc {
            id,
            def,
            lengths: analyzed.lengths,
            terms: analyzed
                .frequencies
                .keys()
                .map(|t| t.as_str().into())
                .collect(),
        });
        (doc, analyzed.frequencies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolmesh::pb::ToolSpec;

    /// Every field is read: the name split, the schema's title, tags, and
    /// parameter names and descriptions at any depth.
    #[test]
    fn fields_of_a_definition() {
        let def = ToolDef::new(ToolSpec {
            name: "refundOrder".into(),
            version: "1.0.0".into(),
            description: "Gives the money back.".into(),
            tags: vec!["billing".into()],
            input_schema: r#"{"type":"object","title":"Refund",
                "properties":{"order_id":{"type":"string","description":"The purchase."},
                "speed":{"type":"string","enum":["express","standard"],"default":"standard"},
                "lines":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string"}}}}}}"#
                .into(),
            ..ToolSpec::default()
        })
        .unwrap();
        let analyzed = Analyzed::of(&def);
        let in_field = |term: &str, field: Field| {
            analyzed
                .frequencies
                .get(term)
                .map_or(0, |f| f[field.index()])
        };
        assert_eq!(in_field("refund", Field::Name), 1);
        assert_eq!(in_field("refund", Field::Title), 1);
        assert_eq!(in_field("money", Field::Description), 1);
        assert_eq!(in_field("bill", Field::Tags), 1);
        assert_eq!(in_field("order", Field::ParameterNames), 1);
        assert_eq!(in_field("sku", Field::ParameterNames), 1);
        assert_eq!(in_field("purchas", Field::ParameterDescriptions), 1);
        assert_eq!(in_field("express", Field::ParameterValues), 1);
        assert_eq!(in_field("standard", Field::ParameterValues), 2);
        assert_eq!(in_field("refund order", Field::Name), 1, "the name's pair");
        assert_eq!(analyzed.lengths[Field::Name.index()], 2);
    }
}

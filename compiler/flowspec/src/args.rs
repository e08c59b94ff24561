//! A step's arguments: a JSON object in the FlowSpec, a vector sorted by name in memory.
//!
//! They were a `BTreeMap`, which allocates a whole node (room for eleven entries: about 1.2 KiB
//! with an [`Expr`]) even for the single argument most steps have: half the memory of a large
//! spec once read. A sorted vector holds exactly its entries and keeps the map's behaviour
//! where it shows: names in order (so the JSON written is the same, byte for byte), one entry
//! per name, and the last of a name repeated in the JSON wins.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::spec::Expr;

/// A step's arguments by name, in name order.
#[derive(Clone, Debug, Default, PartialEq, borsh::BorshSerialize, borsh::BorshDeserialize)]
pub struct Args(Vec<(String, Expr)>);

impl Args {
    /// No arguments.
    pub fn new() -> Self {
        Args(Vec::new())
    }

    /// Sets the argument `name`; returns the expression it replaces, if it was there.
    pub fn insert(&mut self, name: String, expr: Expr) -> Option<Expr> {
        match self.position(&name) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, expr)),
            Err(i) => {
                self.0.insert(i, (name, expr));
                None
            }
        }
    }

    /// The argument `name`.
    pub fn get(&self, name: &str) -> Option<&Expr> {
        self.position(name).ok().map(|i| &self.0[i].1)
    }

    /// The argument `name`, to change it.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Expr> {
        self.position(name).ok().map(|i| &mut self.0[i].1)
    }

    /// Whether there is an argument `name`.
    pub fn contains_key(&self, name: &str) -> bool {
        self.position(name).is_ok()
    }

    /// How many arguments there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The arguments, in name order.
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.0.iter())
    }

    /// The names, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator {
        self.0.iter().map(|(name, _)| name)
    }

    /// The expressions, in name order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Expr> + ExactSizeIterator {
        self.0.iter().map(|(_, expr)| expr)
    }

    fn position(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(n, _)| n.as_str().cmp(name))
    }
}

/// The arguments of an [`Args`], in name order.
#[derive(Clone, Debug)]
pub struct Iter<'a>(std::slice::Iter<'a, (String, Expr)>);

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a String, &'a Expr);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(name, expr)| (name, expr))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(name, expr)| (name, expr))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Args {
    type Item = (&'a String, &'a Expr);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl FromIterator<(String, Expr)> for Args {
    /// As a map collects: sorted by name, and of a name given twice the last one stays.
    fn from_iter<I: IntoIterator<Item = (String, Expr)>>(entries: I) -> Self {
        let mut entries: Vec<(String, Expr)> = entries.into_iter().collect();
        // Stable, so equal names stay in the order given; then each run of one name keeps
        // its last entry (`dedup_by` drops the later of two, so the later value moves first).
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries.dedup_by(|later, kept| {
            if later.0 == kept.0 {
                std::mem::swap(later, kept);
                true
            } else {
                false
            }
        });
        entries.shrink_to_fit();
        Args(entries)
    }
}

impl Serialize for Args {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (name, expr) in &self.0 {
            map.serialize_entry(name, expr)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Args {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Args;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of arguments by name")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Args, A::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
                while let Some(entry) = map.next_entry::<String, Expr>()? {
                    entries.push(entry);
                }
                Ok(entries.into_iter().collect())
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::spec::Node;
    use crate::types::Type;

    fn lit(n: i64) -> Expr {
        Expr::new(Node::Lit { value: json!(n) }, Type::Int)
    }

    #[test]
    fn behaves_as_the_map_it_replaces() {
        let names = ["url", "headers", "body", "url", "Zeta", "é", "a", "body"];
        let mut args = Args::new();
        let mut map = BTreeMap::new();
        for (i, name) in names.iter().enumerate() {
            let n = i as i64;
            assert_eq!(
                args.insert((*name).into(), lit(n)),
                map.insert((*name).to_owned(), lit(n)),
                "{name}"
            );
        }
        let collected: Args = names
            .iter()
            .enumerate()
            .map(|(i, n)| ((*n).to_owned(), lit(i as i64)))
            .collect();
        assert_eq!(
            collected, args,
            "collecting keeps the last of a name, as inserting does"
        );
        assert_eq!(args.len(), map.len());
        assert!(args.iter().eq(map.iter()));
        assert!(args.keys().eq(map.keys()));
        assert!(args.values().eq(map.values()));
        assert_eq!(args.get("body"), map.get("body"));
        assert_eq!(args.get("nope"), None);
        assert!(args.contains_key("é") && !args.contains_key("e"));
        if let Some(e) = args.get_mut("url") {
            *e = lit(99);
        }
        assert_eq!(args.get("url"), Some(&lit(99)));
        assert!(Args::new().is_empty());
    }

    #[test]
    fn writes_and_reads_the_json_of_the_map() {
        let map: BTreeMap<String, Expr> = [("b", 1), ("a", 2), ("c", 3)]
            .into_iter()
            .map(|(k, n)| (k.to_owned(), lit(n)))
            .collect();
        let args: Args = map.clone().into_iter().collect();
        let written = serde_json::to_string(&args).map_err(|e| e.to_string());
        assert_eq!(
            written,
            serde_json::to_string(&map).map_err(|e| e.to_string())
        );
        // Any order in, name order out; a repeated name keeps its last value, as a map's reader.
        let text = r#"{"c":{"op":"lit","value":3,"type":{"type":"int"}},"a":{"op":"lit","value":0,"type":{"type":"int"}},"b":{"op":"lit","value":1,"type":{"type":"int"}},"a":{"op":"lit","value":2,"type":{"type":"int"}}}"#;
        let read: Result<Args, String> = serde_json::from_str(text).map_err(|e| e.to_string());
        assert_eq!(read, Ok(args));
        let as_map: Result<BTreeMap<String, Expr>, String> =
            serde_json::from_str(text).map_err(|e| e.to_string());
        assert_eq!(as_map, Ok(map));
        let not_a_map = serde_json::from_str::<Args>("[]").map_err(|e| e.to_string());
        assert_eq!(
            not_a_map,
            Err(
                "invalid type: sequence, expected an object of arguments by name at line 1 column 0"
                    .into()
            )
        );
    }
}

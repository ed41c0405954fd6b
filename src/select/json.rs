//! Writing decision files: the header pretty-printed, one rule per line (`{"op": "bcast", …}`),
//! which keeps files short, readable and diffable (the embedded `defaults.json` is laid out so).

use std::io;

use serde::Serialize;
use serde_json::ser::Formatter;

use super::file::DecisionFile;
use crate::error::{Error, Result};

/// Compact JSON with a space after `,` and `:`.
struct OneLine;

impl Formatter for OneLine {
    fn begin_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.begin_array_value(w, first)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }
}

fn bad(e: impl std::fmt::Display) -> Error {
    Error::InvalidArgument { coll: "decision file", msg: format!("cannot write JSON: {e}") }
}

fn one_line(v: &impl Serialize) -> Result<String> {
    let mut buf = Vec::new();
    v.serialize(&mut serde_json::Serializer::with_formatter(&mut buf, OneLine)).map_err(bad)?;
    String::from_utf8(buf).map_err(bad)
}

impl DecisionFile {
    /// This file as JSON (see the module doc); it parses back to an equal `DecisionFile`.
    pub fn to_json(&self) -> Result<String> {
        let mut out = format!("{{\n  \"format\": {},\n  \"version\": {},\n", one_line(&self.format)?, self.version);
        if let Some(p) = &self.provenance {
            let pretty = serde_json::to_string_pretty(p).map_err(bad)?;
            out += &format!("  \"provenance\": {},\n", pretty.replace('\n', "\n  "));
        }
        out += "  \"rules\": [";
        for (i, r) in self.rules.iter().enumerate() {
            out += if i == 0 { "\n    " } else { ",\n    " };
            out += &one_line(r)?;
        }
        out += if self.rules.is_empty() { "]\n}\n" } else { "\n  ]\n}\n" };
        Ok(out)
    }
}

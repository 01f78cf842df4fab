// JSON as grammars (grammar.h): any JSON value or object, and the values a
// JSON Schema allows, written as GBNF for Grammar::parse.
//
// The JSON grammar bounds what a model could repeat forever: at most 20
// whitespace characters between two tokens, at most 16 digits in a number's
// integer part and in its fraction, 2 in its exponent (so a double holds
// every number). Strings are not bounded.
//
// The schema converter reads the keywords below and refuses every other one
// with invalid_argument naming it and where it is (a serve request turns
// that into a 400):
//   type (object, array, string, number, integer, boolean, null, or a list of them);
//   properties and required: the properties in the schema's order, the
//     optional ones possibly absent; no other property ever (additionalProperties
//     may only be false, which is also what its absence means here); an object
//     without `properties` may hold any members (none, with additionalProperties false);
//   items, minItems, maxItems (at most 1000);
//   enum and const (any JSON values, written compactly);
//   anyOf and oneOf (both as anyOf: the grammar cannot exclude a value that
//     matches two branches);
//   pattern (json_pattern_to_gbnf), $ref to #/$defs/NAME or #/definitions/NAME
//     (recursion allowed where something is matched first), and $defs/definitions;
//   annotations, ignored: title, description, default, examples, $schema, $id, $comment.
// An empty schema (or `true`) allows any value.
#pragma once

#include <string>
#include <string_view>

#include "tensorpc/status.h"

namespace tensorpc {

// The GBNF of one JSON value, or with object_root of one JSON object, as `root`.
std::string json_gbnf(bool object_root = false);

// The GBNF, as `root`, of the JSON values valid against the JSON Schema `schema` (JSON text).
StatusOr<std::string> json_schema_to_gbnf(std::string_view schema);

// A GBNF expression for the contents of a JSON string (between its quotes,
// as written in JSON) whose decoded text matches the regular expression
// `pattern` as a whole: literals, classes ([a-z], [^...], \d \w \s and their
// negations, .), groups ( ) and (?: ), alternation, * + ? {m} {m,} {m,n}, ^ at
// the start and $ at the end. A pattern is matched whole even without its
// anchors (a subset of the strings that contain a match, so every output is
// valid). Characters that JSON escapes are written escaped; where a class
// allows them as raw control characters only the rest is kept (\s: a space).
// Anything else (backreferences, lookaround, lazy quantifiers, anchors
// elsewhere) is invalid_argument naming it.
StatusOr<std::string> json_pattern_to_gbnf(std::string_view pattern);

}  // namespace tensorpc

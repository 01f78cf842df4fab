// JSON Schema to grammar: random walks over the bundled vocabulary give JSON
// that a small validator (the supported keywords, written from the spec)
// accepts; unsupported keywords are refused by name.
#include "model/runtime/json_schema.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "model/runtime/grammar_testing.h"
#include "model/text/vocabulary_files_testing.h"

namespace tensorpc {
namespace {

using Json = nlohmann::ordered_json;

// Whether `v` is valid against `schema` (the keywords json_schema.h supports), `root` for $ref.
bool valid(const Json& v, const Json& schema, const Json& root) {
  if (schema.is_boolean()) return schema.get<bool>();
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"];
    const std::string section = ref.starts_with("#/$defs/") ? "$defs" : "definitions";
    return valid(v, root[section][ref.substr(ref.find('/', 2) + 1)], root);
  }
  if (schema.contains("const") && v != schema["const"]) return false;
  if (schema.contains("enum") && std::find(schema["enum"].begin(), schema["enum"].end(), v) == schema["enum"].end())
    return false;
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!schema.contains(key)) continue;
    bool any = false;
    for (const Json& s : schema[key]) any = any || valid(v, s, root);
    if (!any) return false;
  }
  if (schema.contains("type")) {
    const Json types = schema["type"].is_array() ? schema["type"] : Json::array({schema["type"]});
    bool typed = false;
    for (const std::string t : types) {
      typed = typed || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
              (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
              (t == "integer" && v.is_number_integer()) || (t == "boolean" && v.is_boolean()) ||
              (t == "null" && v.is_null());
    }
    if (!typed) return false;
  }
  if (v.is_object() && schema.contains("properties")) {
    for (const auto& [name, member] : v.items()) {
      if (!schema["properties"].contains(name)) return false;  // additionalProperties: false
      if (!valid(member, schema["properties"][name], root)) return false;
    }
    for (const std::string name : schema.value("required", Json::array())) {
      if (!v.contains(name)) return false;
    }
  }
  if (v.is_array()) {
    if (v.size() < schema.value("minItems", 0u) || v.size() > schema.value("maxItems", 1000000u)) return false;
    for (const Json& item : v) {
      if (schema.contains("items") && !valid(item, schema["items"], root)) return false;
    }
  }
  if (v.is_string() && schema.contains("pattern") &&
      !std::regex_search(v.get<std::string>(), std::regex(schema["pattern"].get<std::string>())))
    return false;
  return true;
}

std::shared_ptr<const Grammar> schema_grammar(const std::string& schema) {
  auto gbnf = json_schema_to_gbnf(schema);
  EXPECT_TRUE(gbnf.ok()) << gbnf.status().to_string();
  return gbnf.ok() ? test::parse_or_fail(gbnf.value()) : nullptr;
}

bool matches(const std::shared_ptr<const Grammar>& grammar, std::string_view text) {
  GrammarState state(grammar);
  return state.advance(text) && state.complete();
}

const char* const kPerson = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "description": "annotations are ignored"},
    "age": {"type": "integer"},
    "role": {"enum": ["king", "prophet", 7, null]},
    "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,8}$"}, "minItems": 1, "maxItems": 3},
    "alive": {"type": ["boolean", "null"]}
  },
  "required": ["name", "tags"],
  "additionalProperties": false
})";

TEST(JsonSchema, PropertiesInOrderOptionalOnesMayBeAbsent) {
  const auto g = schema_grammar(kPerson);
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, R"({"name": "David", "tags": ["king"]})"));
  EXPECT_TRUE(matches(g, R"({"name":"Amos","age":40,"role":"prophet","tags":["a","b","c"],"alive":null})"));
  EXPECT_TRUE(matches(g, "{\n  \"name\": \"x\",\n  \"role\": 7,\n  \"tags\": [\"z\"]\n}"));
  EXPECT_FALSE(matches(g, R"({"tags": ["king"], "name": "David"})")) << "out of order";
  EXPECT_FALSE(matches(g, R"({"name": "David"})")) << "tags is required";
  EXPECT_FALSE(matches(g, R"({"name": "David", "tags": []})")) << "minItems";
  EXPECT_FALSE(matches(g, R"({"name": "David", "tags": ["a","b","c","d"]})")) << "maxItems";
  EXPECT_FALSE(matches(g, R"({"name": "David", "tags": ["King"]})")) << "pattern";
  EXPECT_FALSE(matches(g, R"({"name": "David", "tags": ["a"], "x": 1})")) << "no other property";
  EXPECT_FALSE(matches(g, R"({"name": "David", "age": 4.5, "tags": ["a"]})")) << "an integer";
  EXPECT_FALSE(matches(g, R"({"name": "David", "role": "judge", "tags": ["a"]})")) << "enum";
}

TEST(JsonSchema, RefsAnyOfConstAndPatterns) {
  const auto g = schema_grammar(R"({
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": "number"},
                       "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"]}},
    "anyOf": [{"$ref": "#/$defs/node"}, {"const": {"k": [1, "two"]}},
              {"type": "string", "pattern": "^(ab|c\\d)+[^x-z]?\\.\"$"}]
  })");
  ASSERT_TRUE(g);
  EXPECT_TRUE(matches(g, R"({"v": 1, "next": {"v": -2.5e3, "next": null}})"));
  EXPECT_TRUE(matches(g, R"({"k":[1,"two"]})"));
  EXPECT_TRUE(matches(g, R"("abc1c2w.\"")"));
  EXPECT_TRUE(matches(g, R"("ab.\"")"));
  EXPECT_FALSE(matches(g, R"("abx.\"")"));
  EXPECT_FALSE(matches(g, R"({"v": 1})"));
  EXPECT_FALSE(matches(g, R"({"k":[1,"three"]})"));
}

TEST(JsonSchema, UnsupportedKeywordsAreRefusedByName) {
  const auto refused = [](const std::string& schema) {
    auto gbnf = json_schema_to_gbnf(schema);
    EXPECT_FALSE(gbnf.ok()) << schema;
    if (!gbnf.ok()) {
      EXPECT_EQ(gbnf.status().code(), StatusCode::invalid_argument);
    }
    return gbnf.ok() ? std::string() : gbnf.status().message();
  };
  EXPECT_EQ(refused(R"({"type": "string", "minLength": 3})"), "json schema: #: keyword 'minLength' is not supported");
  EXPECT_EQ(refused(R"({"properties": {"a": {"not": {}}}})"),
            "json schema: #/properties/a: keyword 'not' is not supported");
  EXPECT_EQ(refused(R"({"type": "object", "properties": {}, "additionalProperties": true})"),
            "json schema: #: additionalProperties other than false is not supported");
  EXPECT_EQ(refused(R"({"type": "tuple"})"), "json schema: #: type 'tuple' is not a JSON Schema type");
  EXPECT_EQ(refused(R"({"$ref": "#/components/x"})"),
            "json schema: #: $ref '#/components/x' is not a definition under #/$defs or #/definitions");
  EXPECT_EQ(refused(R"({"type": "string", "pattern": "(?=a)b"})"),
            "json schema: #: pattern '(?=a)b': at 1: only (?: ) groups are supported, not lookaround or names");
  EXPECT_EQ(refused(R"({"type": "array", "maxItems": 100000})"),
            "json schema: #: maxItems must be an integer from 0 to 1000");
  EXPECT_EQ(refused(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})"),
            "json schema: #: required names \"b\", which is not one of its properties");
  EXPECT_EQ(refused("{"), "json schema: not valid JSON");
}

TEST(JsonSchema, DeepSchemasAreRefused) {
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "{\"items\": ";
  deep += "{}";
  deep.append(100, '}');
  auto gbnf = json_schema_to_gbnf(deep);
  ASSERT_FALSE(gbnf.ok());
  EXPECT_NE(gbnf.status().message().find("nested deeper than 64"), std::string::npos) << gbnf.status().message();
  // A schema that refers to itself is converted once, so it may recurse as deep as the text does.
  const auto list = schema_grammar(R"({"$defs": {"l": {"type": "array", "items": {"$ref": "#/$defs/l"}}},
                                       "$ref": "#/$defs/l"})");
  ASSERT_TRUE(list);
  EXPECT_TRUE(matches(list, "[[[[[]]]], []]"));
  EXPECT_FALSE(matches(list, "[[1]]"));
}

TEST(JsonGrammar, WhitespaceAndNumbersAreBounded) {
  const auto any = test::parse_or_fail(json_gbnf());
  const auto object = test::parse_or_fail(json_gbnf(/*object_root=*/true));
  ASSERT_TRUE(any && object);
  EXPECT_TRUE(matches(any, "[1, {\"a\": [true, false, null]}, \"\\u00e9\\n\", -0.5e-3]"));
  const auto spaced = [](size_t n) { return std::string(1, '[').append(n, ' ').append("1]"); };
  EXPECT_TRUE(matches(any, spaced(20)));
  EXPECT_FALSE(matches(any, spaced(21)));
  EXPECT_TRUE(matches(any, std::string(16, '9')));
  EXPECT_FALSE(matches(any, std::string(17, '9')));
  EXPECT_FALSE(matches(any, "01"));
  EXPECT_TRUE(matches(object, "{}"));
  EXPECT_FALSE(matches(object, "[]")) << "json_object means an object at the root";
}

class JsonSchemaWalk : public ::testing::Test {
 protected:
  void SetUp() override {
    test::open_tokenizer(test::vocabulary_path("kjv-bpe"), tokenizer_);
    if (tokenizer_) vocab_ = std::make_unique<GrammarVocabulary>(*tokenizer_);
  }
  void check(const std::string& schema_text, int seeds) {
    const auto grammar = schema_grammar(schema_text);
    ASSERT_TRUE(grammar);
    const Json schema = Json::parse(schema_text);
    int ended = 0;
    for (int seed = 0; seed < seeds; ++seed) {
      const auto text = test::random_walk(*vocab_, grammar, static_cast<uint64_t>(seed), 400);
      if (!text) continue;
      ++ended;
      const Json value = Json::parse(*text, nullptr, false);
      ASSERT_FALSE(value.is_discarded()) << *text;
      EXPECT_TRUE(valid(value, schema, schema)) << *text;
    }
    EXPECT_GE(ended * 4, seeds) << "too few walks ended";
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<GrammarVocabulary> vocab_;
};

TEST_F(JsonSchemaWalk, ObjectsValidateAgainstTheSchema) {
  if (vocab_) check(kPerson, 30);
}

TEST_F(JsonSchemaWalk, ArraysOfEnumsAndAnyOfValidate) {
  if (vocab_)
    check(R"({"type": "array", "minItems": 2, "maxItems": 4,
              "items": {"anyOf": [{"type": "integer"}, {"enum": ["light", "darkness"]}, {"type": "boolean"}]}})",
          30);
}

TEST(JsonSchemaValidator, RefusesWhatItShould) {
  const Json schema = Json::parse(kPerson);
  EXPECT_TRUE(valid(Json::parse(R"({"name": "a", "tags": ["b"]})"), schema, schema));
  EXPECT_FALSE(valid(Json::parse(R"({"name": "a", "tags": ["B"]})"), schema, schema));
  EXPECT_FALSE(valid(Json::parse(R"({"name": "a"})"), schema, schema));
  EXPECT_FALSE(valid(Json::parse(R"({"name": "a", "tags": ["b"], "z": 0})"), schema, schema));
}

}  // namespace
}  // namespace tensorpc

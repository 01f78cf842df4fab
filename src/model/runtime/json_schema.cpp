// JSON and JSON Schema as GBNF (json_schema.h).
#include "model/runtime/json_schema.h"

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

namespace tensorpc {
namespace {

using Json = nlohmann::ordered_json;  // ordered: properties keep the schema's order

// The rules of any JSON value; a schema's rules use them by name.
constexpr std::string_view kJsonRules = R"(
value   ::= object | array | string | number | boolean | null
object  ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array   ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string  ::= "\"" char* "\""
char    ::= [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
number  ::= integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?
boolean ::= "true" | "false"
null    ::= "null"
ws      ::= [ \t\n\r]{0,20}
)";

// `text` as a GBNF literal.
std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto b = static_cast<uint8_t>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (b < 0x20) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[b >> 4];
      out += hex[b & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

class SchemaConverter {
 public:
  explicit SchemaConverter(const Json& document) : document_(document) {}

  StatusOr<std::string> convert_root() {
    TENSORPC_ASSIGN_OR_RETURN(const std::string root, convert(document_, "#"));
    std::string out = "root ::= " + root + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out + std::string(kJsonRules);
  }

 private:
  static Status error(const std::string& where, const std::string& what) {
    return invalid_argument("json schema: " + where + ": " + what);
  }

  std::string add_rule(std::string body) {
    std::string name = "schema-" + std::to_string(rules_.size() + 1);
    rules_.emplace_back(name, std::move(body));
    return name;
  }

  // A GBNF expression for the values `schema` (at `where`) allows.
  StatusOr<std::string> convert(const Json& schema, const std::string& where) {
    if (++depth_ > 64) return error(where, "nested deeper than 64");
    auto result = convert_object(schema, where);
    --depth_;
    return result;
  }

  StatusOr<std::string> convert_object(const Json& schema, const std::string& where) {
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return std::string("value");
      return error(where, "the schema false allows no value");
    }
    if (!schema.is_object()) return error(where, "a schema must be an object or a boolean");
    static const std::set<std::string, std::less<>> known{
        "type",        "properties", "required",    "additionalProperties",
        "enum",        "const",      "items",       "minItems",
        "maxItems",    "anyOf",      "oneOf",       "pattern",
        "$ref",        "$defs",      "definitions", "title",
        "description", "default",    "examples",    "$schema",
        "$id",         "$comment"};
    for (const auto& [key, value] : schema.items()) {
      if (!known.contains(key)) return error(where, "keyword '" + key + "' is not supported");
    }
    if (schema.contains("$ref")) return reference(schema, where);
    if (schema.contains("const")) return gbnf_literal(schema["const"].dump());
    if (schema.contains("enum")) {
      const Json& values = schema["enum"];
      if (!values.is_array() || values.empty()) return error(where, "enum must be a non-empty array");
      std::string out = "(";
      for (const Json& v : values) out += (out.size() > 1 ? " | " : "") + gbnf_literal(v.dump());
      return out + ")";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!schema.contains(key)) continue;
      const Json& branches = schema[key];
      if (!branches.is_array() || branches.empty())
        return error(where, std::string(key) + " must be a non-empty array");
      std::string out = "(";
      for (size_t i = 0; i < branches.size(); ++i) {
        TENSORPC_ASSIGN_OR_RETURN(const std::string branch,
                                  convert(branches[i], where + "/" + key + "/" + std::to_string(i)));
        out += (i ? " | " : "") + branch;
      }
      return out + ")";
    }
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const Json& type = schema["type"];
      if (type.is_string()) types.push_back(type.get<std::string>());
      if (type.is_array()) {
        for (const Json& t : type) {
          if (!t.is_string()) return error(where, "type must be a string or an array of strings");
          types.push_back(t.get<std::string>());
        }
      }
      if (types.empty()) return error(where, "type must be a string or a non-empty array of strings");
    } else if (schema.contains("properties")) {
      types = {"object"};
    } else if (schema.contains("items")) {
      types = {"array"};
    } else if (schema.contains("pattern")) {
      types = {"string"};
    } else {
      return std::string("value");
    }
    std::string out;
    for (const std::string& type : types) {
      TENSORPC_ASSIGN_OR_RETURN(const std::string one, typed(schema, type, where));
      out += (out.empty() ? "" : " | ") + one;
    }
    return types.size() == 1 ? out : "(" + out + ")";
  }

  StatusOr<std::string> typed(const Json& schema, const std::string& type, const std::string& where) {
    if (type == "object") return object(schema, where);
    if (type == "array") return array(schema, where);
    if (type == "string") {
      if (!schema.contains("pattern")) return std::string("string");
      if (!schema["pattern"].is_string()) return error(where, "pattern must be a string");
      auto pattern = json_pattern_to_gbnf(schema["pattern"].get<std::string>());
      if (!pattern.ok()) return error(where, pattern.status().message());
      return add_rule("\"\\\"\" " + pattern.value() + " \"\\\"\"");
    }
    if (type == "number" || type == "integer" || type == "boolean" || type == "null") return type;
    return error(where, "type '" + type + "' is not a JSON Schema type");
  }

  StatusOr<std::string> object(const Json& schema, const std::string& where) {
    if (schema.contains("additionalProperties") && schema["additionalProperties"] != Json(false))
      return error(where, "additionalProperties other than false is not supported");
    if (!schema.contains("properties"))
      return std::string(schema.contains("additionalProperties") ? "( \"{\" ws \"}\" )" : "object");
    const Json& properties = schema["properties"];
    if (!properties.is_object()) return error(where, "properties must be an object");
    std::set<std::string> required;
    if (schema.contains("required")) {
      if (!schema["required"].is_array()) return error(where, "required must be an array of names");
      for (const Json& name : schema["required"]) {
        if (!name.is_string() || !properties.contains(name.get<std::string>()))
          return error(where, "required names " + name.dump() + ", which is not one of its properties");
        required.insert(name.get<std::string>());
      }
    }
    // first(i): members from property i on, none written yet; rest(i): the same after one.
    std::vector<std::string> members;
    std::vector<bool> optional;
    for (const auto& [name, property] : properties.items()) {
      TENSORPC_ASSIGN_OR_RETURN(const std::string value, convert(property, where + "/properties/" + name));
      members.push_back(gbnf_literal(Json(name).dump()) + " ws \":\" ws " + value + " ws");
      optional.push_back(!required.contains(name));
    }
    std::string first = "\"\"", rest = "\"\"";
    for (size_t i = members.size(); i-- > 0;) {
      const std::string next_rest = rest;
      rest = add_rule("\",\" ws " + members[i] + " " + next_rest + (optional[i] ? " | " + next_rest : ""));
      first = add_rule(members[i] + " " + next_rest + (optional[i] ? " | " + first : ""));
    }
    return "( \"{\" ws " + first + " \"}\" )";
  }

  StatusOr<std::string> array(const Json& schema, const std::string& where) {
    std::string item = "value";
    if (schema.contains("items")) {
      TENSORPC_ASSIGN_OR_RETURN(item, convert(schema["items"], where + "/items"));
    }
    int64_t min = 0, max = -1;
    for (const auto& [key, bound] : {std::pair<const char*, int64_t*>{"minItems", &min}, {"maxItems", &max}}) {
      if (!schema.contains(key)) continue;
      const Json& v = schema[key];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1000)
        return error(where, std::string(key) + " must be an integer from 0 to 1000");
      *bound = v.get<int64_t>();
    }
    if (max >= 0 && max < min) return error(where, "maxItems is below minItems");
    if (max == 0) return std::string("( \"[\" ws \"]\" )");
    const std::string more = "( \",\" ws " + item + " ws )";
    // {a,b} more items after the first: a = min - 1 (or 0), b = max - 1 (or none).
    std::string tail = "{";
    tail += std::to_string(std::max<int64_t>(min - 1, 0));
    tail += ',';
    if (max >= 0) tail += std::to_string(max - 1);
    tail += '}';
    const std::string items = "( " + item + " ws " + more + tail + " )";
    return add_rule("\"[\" ws " + items + (min == 0 ? "?" : "") + " \"]\"");
  }

  StatusOr<std::string> reference(const Json& schema, const std::string& where) {
    const Json& ref = schema["$ref"];
    if (!ref.is_string()) return error(where, "$ref must be a string");
    const std::string path = ref.get<std::string>();
    for (const char* key : {"type", "properties", "items", "enum", "const", "anyOf", "oneOf", "pattern"}) {
      if (schema.contains(key)) return error(where, std::string("'") + key + "' beside $ref is not supported");
    }
    if (auto it = refs_.find(path); it != refs_.end()) return it->second;
    std::string section, name;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      if (path.starts_with(prefix)) {
        section = std::string(prefix).substr(2, std::string(prefix).size() - 3);
        name = path.substr(std::string(prefix).size());
      }
    }
    if (section.empty() || !document_.contains(section) || !document_[section].contains(name))
      return error(where, "$ref '" + path + "' is not a definition under #/$defs or #/definitions");
    // The rule is named before its body is made, so the definition may refer to itself.
    const std::string rule = add_rule("");
    refs_.emplace(path, rule);
    TENSORPC_ASSIGN_OR_RETURN(const std::string body, convert(document_[section][name], path));
    for (auto& [n, b] : rules_) {
      if (n == rule) b = body;
    }
    return rule;
  }

  const Json& document_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
};

}  // namespace

std::string json_gbnf(bool object_root) {
  return std::string(object_root ? "root ::= object\n" : "root ::= value\n") + std::string(kJsonRules);
}

StatusOr<std::string> json_schema_to_gbnf(std::string_view schema) {
  const Json document = Json::parse(schema, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return invalid_argument("json schema: not valid JSON");
  return SchemaConverter(document).convert_root();
}

}  // namespace tensorpc

// Tools of a request body; see tool_input.h.
#include "serve/tool_input.h"

#include <utility>

#include "serve/request_input.h"

namespace tensorpc::serve {
namespace {

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Problem read_tool_choice(const json& body, CompletionRequest* request) {
  const json* choice = field(body, "tool_choice");
  const bool tools = !request->tools.empty();
  request->tool_choice = tools ? ToolChoice::automatic : ToolChoice::none;
  if (choice == nullptr) return std::nullopt;
  if (choice->is_string()) {
    const std::string& v = choice->get_ref<const std::string&>();
    if (v == "none") {
      request->tool_choice = ToolChoice::none;
    } else if (v == "auto") {
      // With no tools, "auto" is "none".
    } else if (v == "required") {
      if (!tools)
        return invalid_request("invalid_value", "tool_choice",
                               "'tool_choice' is \"required\" but no 'tools' are given");
      request->tool_choice = ToolChoice::required;
    } else {
      return invalid_request("invalid_value", "tool_choice",
                             "'tool_choice' is " + shown(*choice) +
                                 ": expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", ...}");
    }
    return std::nullopt;
  }
  if (!choice->is_object()) return wrong_type("tool_choice", "a string or an object", *choice);
  std::string type;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(*choice, "type", &type));
  if (type != "function") {
    return invalid_request("invalid_value", "tool_choice.type", "'tool_choice.type' must be \"function\"");
  }
  const json* function = field(*choice, "function");
  if (function == nullptr) return missing_field("tool_choice.function");
  if (!function->is_object()) return wrong_type("tool_choice.function", "an object", *function);
  const json* name = field(*function, "name");
  if (name == nullptr) return missing_field("tool_choice.function.name");
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string(*name, "tool_choice.function.name", &request->tool_choice_name));
  for (const ToolFunction& t : request->tools) {
    if (t.name == request->tool_choice_name) {
      request->tool_choice = ToolChoice::function;
      return std::nullopt;
    }
  }
  return invalid_request(
      "invalid_value", "tool_choice.function.name",
      "'tool_choice' names the function \"" + request->tool_choice_name + "\", which is not one of 'tools'");
}

}  // namespace

const nlohmann::ordered_json& ordered_at(const nlohmann::ordered_json& v, std::string_view key) {
  static const nlohmann::ordered_json kNull;
  if (!v.is_object()) return kNull;
  const auto it = v.find(std::string(key));
  return it == v.end() ? kNull : *it;
}

const nlohmann::ordered_json& ordered_at(const nlohmann::ordered_json& v, size_t i) {
  static const nlohmann::ordered_json kNull;
  return v.is_array() && i < v.size() ? v[i] : kNull;
}

nlohmann::ordered_json ordered_body(std::string_view body_text) {
  return nlohmann::ordered_json::parse(body_text, nullptr, /*allow_exceptions=*/false);
}

Problem read_function(const json& function, const nlohmann::ordered_json& ordered, const std::string& param,
                      const char* parameters_key, const std::vector<ToolFunction>& seen, ToolFunction* out) {
  if (!function.is_object()) return wrong_type(param, "an object", function);
  const json* name = field(function, "name");
  if (name == nullptr) return missing_field(param + ".name");
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string(*name, param + ".name", &out->name));
  if (!valid_name(out->name)) {
    return invalid_request("invalid_value", param + ".name",
                           "'" + param + ".name' must be 1 to 64 letters, digits, '_' or '-', not " + shown(*name));
  }
  for (const ToolFunction& t : seen) {
    if (t.name == out->name) {
      return invalid_request("invalid_value", param + ".name", "two tools are named \"" + out->name + "\"");
    }
  }
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(function, "description", &out->description));
  bool strict = false;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_bool_field(function, "strict", &strict));
  const json* parameters = field(function, parameters_key);
  if (parameters != nullptr && !parameters->is_object()) {
    return wrong_type(param + "." + parameters_key, "an object (a JSON Schema)", *parameters);
  }
  const nlohmann::ordered_json& ordered_parameters = ordered_at(ordered, parameters_key);
  out->parameters = ordered_parameters.is_object() ? ordered_parameters.dump() : "{}";
  // What templates print: OpenAI's tool object, its function as the request wrote it.
  nlohmann::ordered_json tool_function = nlohmann::ordered_json::object();
  if (ordered.is_object() && std::string_view(parameters_key) == "parameters") {
    tool_function = ordered;
  } else {
    tool_function["name"] = out->name;
    if (!out->description.empty()) tool_function["description"] = out->description;
    tool_function["parameters"] =
        ordered_parameters.is_object() ? ordered_parameters : nlohmann::ordered_json::object();
  }
  nlohmann::ordered_json tool = nlohmann::ordered_json::object();
  tool["type"] = "function";
  tool["function"] = std::move(tool_function);
  out->tool_json = tool.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  return std::nullopt;
}

Problem read_tool_list(const json& body, std::string_view body_text, std::vector<ToolFunction>* out) {
  const json* tools = field(body, "tools");
  if (tools != nullptr) {
    if (!tools->is_array()) return wrong_type("tools", "an array", *tools);
    const nlohmann::ordered_json ordered = tools->empty() ? nlohmann::ordered_json() : ordered_body(body_text);
    const nlohmann::ordered_json& ordered_tools = ordered_at(ordered, "tools");
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string param = indexed("tools", i);
      const json& tool = (*tools)[i];
      if (!tool.is_object()) return wrong_type(param, "an object", tool);
      std::string type;
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(tool, "type", &type));
      if (type != "function") {
        return invalid_request("unsupported_value", param + ".type",
                               "'" + param + ".type' must be \"function\" (the only kind of tool)");
      }
      const json* function = field(tool, "function");
      if (function == nullptr) return missing_field(param + ".function");
      ToolFunction f;
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_function(*function, ordered_at(ordered_at(ordered_tools, i), "function"),
                                                     param + ".function", "parameters", *out, &f));
      out->push_back(std::move(f));
    }
  }
  return std::nullopt;
}

Problem read_openai_tools(const json& body, std::string_view body_text, CompletionRequest* request) {
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_tool_list(body, body_text, &request->tools));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_tool_choice(body, request));
  return read_bool_field(body, "parallel_tool_calls", &request->parallel_tool_calls);
}

Problem read_tool_calls(const json& calls, const std::string& param, std::vector<ToolCall>* out) {
  if (!calls.is_array()) return wrong_type(param, "an array", calls);
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string at = indexed(param, i);
    const json& call = calls[i];
    if (!call.is_object()) return wrong_type(at, "an object", call);
    ToolCall c;
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(call, "id", &c.id));
    const json* function = field(call, "function");
    if (function == nullptr) return missing_field(at + ".function");
    if (!function->is_object()) return wrong_type(at + ".function", "an object", *function);
    const json* name = field(*function, "name");
    if (name == nullptr) return missing_field(at + ".function.name");
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string(*name, at + ".function.name", &c.name));
    const json* arguments = field(*function, "arguments");
    if (arguments == nullptr) return missing_field(at + ".function.arguments");
    if (arguments->is_object()) {
      c.arguments = arguments->dump(-1, ' ', false, json::error_handler_t::replace);
    } else {
      TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string(*arguments, at + ".function.arguments", &c.arguments));
    }
    out->push_back(std::move(c));
  }
  return std::nullopt;
}

}  // namespace tensorpc::serve

// Reading the pipeline slots of tokenizer.json (normalizer, pre_tokenizer, decoder, post_processor): each is
// null, one component {"type": ...}, or a {"type": "Sequence", <key>: [...]} of components, possibly nested.
// The parts are flattened in order, each with its JSON path, so an error can say where the file holds it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "gsurg/error.hpp"

namespace gsurg {
namespace detail {

// A component and where it is, e.g. {"normalizer.normalizers[1]", {"type": "Replace", ...}}.
struct JsonPart {
  std::string path;
  nlohmann::json value;
};

// The "type" of a component ("?" when it is not an object or has none).
inline std::string type_of(const nlohmann::json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "?";
}

// The components of a slot in order, Sequences (members under `key`) flattened; none for null.
inline void flatten_parts(const nlohmann::json& j, const std::string& path, const char* key,
                          std::vector<JsonPart>& out) {
  if (j.is_null()) return;
  if (type_of(j) == "Sequence" && j.contains(key) && j[key].is_array()) {
    const nlohmann::json& members = j[key];
    for (size_t k = 0; k < members.size(); ++k) {
      flatten_parts(members[k], path + "." + key + "[" + std::to_string(k) + "]", key, out);
    }
  } else {
    out.push_back(JsonPart{path, j});
  }
}

inline std::vector<JsonPart> flatten_parts(const nlohmann::json& root, const char* slot, const char* key) {
  std::vector<JsonPart> out;
  if (root.contains(slot)) flatten_parts(root[slot], slot, key, out);
  return out;
}

// A string member that must be present: throws gsurg::Error("<path>: ...") otherwise.
inline std::string required_string(const JsonPart& part, const char* key) {
  auto it = part.value.find(key);
  if (it == part.value.end() || !it->is_string()) {
    throw Error(part.path + ": " + type_of(part.value) + " has no string \"" + key + "\"");
  }
  return it->get<std::string>();
}

// The pattern of a Replace or Split: {"String": s} gives s. {"Regex": r} gives r with *regex set when the
// caller accepts a regex (regex != nullptr), else it is refused.
inline std::string pattern_text(const JsonPart& part, bool* regex) {
  const nlohmann::json pattern = part.value.value("pattern", nlohmann::json());
  if (pattern.is_object() && pattern.size() == 1) {
    if (pattern.contains("String") && pattern["String"].is_string()) {
      if (regex) *regex = false;
      return pattern["String"].get<std::string>();
    }
    if (regex && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      *regex = true;
      return pattern["Regex"].get<std::string>();
    }
  }
  throw Error(part.path + ": " + type_of(part.value) + " with the pattern " + pattern.dump() +
              " is not supported (only {\"String\": ...}" + (regex ? " or an alternation of literals" : "") +
              ")");
}

}  // namespace detail
}  // namespace gsurg

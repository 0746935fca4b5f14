// Dotted-path access into model.json with errors that name the file and key (see json_access.hpp).
#include "gsurg/json_access.hpp"

#include "gsurg/error.hpp"

namespace gsurg {

const nlohmann::json* JsonDoc::find(const std::string& key) const {
  const nlohmann::json* node = &root_;
  size_t start = 0;
  while (start <= key.size()) {
    size_t dot = key.find('.', start);
    std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!node->is_object()) return nullptr;
    auto it = node->find(part);
    if (it == node->end()) return nullptr;
    node = &*it;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return node;
}

void JsonDoc::fail(const std::string& key, const std::string& what) const {
  throw Error(file_ + ": entry \"" + key + "\" " + what);
}

bool JsonDoc::has(const std::string& key) const { return find(key) != nullptr; }

const nlohmann::json& JsonDoc::at(const std::string& key) const {
  const nlohmann::json* node = find(key);
  if (node == nullptr) fail(key, "is missing");
  return *node;
}

std::string JsonDoc::str(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_string()) fail(key, "must be a string, not " + v.dump());
  std::string s = v.get<std::string>();
  // A NUL would silently cut the string where it becomes a C string (a path, a blob name).
  if (s.find('\0') != std::string::npos) fail(key, "contains a NUL character: " + v.dump());
  return s;
}

int64_t JsonDoc::integer(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_number_integer()) fail(key, "must be an integer, not " + v.dump());
  return v.get<int64_t>();
}

double JsonDoc::number(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_number()) fail(key, "must be a number, not " + v.dump());
  return v.get<double>();
}

bool JsonDoc::boolean(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_boolean()) fail(key, "must be true or false, not " + v.dump());
  return v.get<bool>();
}

std::vector<std::string> JsonDoc::strings(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_array()) fail(key, "must be a list of strings, not " + v.dump());
  std::vector<std::string> out;
  for (const auto& item : v) {
    if (!item.is_string()) fail(key, "must be a list of strings, not " + v.dump());
    out.push_back(item.get<std::string>());
    if (out.back().find('\0') != std::string::npos) fail(key, "contains a NUL character: " + item.dump());
  }
  return out;
}

std::vector<int64_t> JsonDoc::integers(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (v.is_number_integer()) return {v.get<int64_t>()};
  if (!v.is_array()) fail(key, "must be an integer or a list of integers, not " + v.dump());
  std::vector<int64_t> out;
  for (const auto& item : v) {
    if (!item.is_number_integer()) fail(key, "must be an integer or a list of integers, not " + v.dump());
    out.push_back(item.get<int64_t>());
  }
  return out;
}

}  // namespace gsurg

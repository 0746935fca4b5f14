// Typed access to model.json entries by dotted key path ("decoder.rope.theta"): every missing or
// ill-typed entry throws gsurg::Error naming the file and the full key, so a bad model.json is one clear line.
// A string holding a NUL character is refused (it would be cut where it becomes a path or blob name).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gsurg {

class JsonDoc {
 public:
  JsonDoc(const nlohmann::json& root, std::string file) : root_(root), file_(std::move(file)) {}

  bool has(const std::string& key) const;               // true when the dotted path exists (any type)
  const nlohmann::json& at(const std::string& key) const;  // the raw entry; throws when missing
  std::string str(const std::string& key) const;
  int64_t integer(const std::string& key) const;          // a JSON integer (not a float, not a bool)
  double number(const std::string& key) const;            // any JSON number
  bool boolean(const std::string& key) const;
  std::vector<std::string> strings(const std::string& key) const;
  std::vector<int64_t> integers(const std::string& key) const;  // a list, or one integer as a list of 1

  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  const std::string& file() const { return file_; }

 private:
  const nlohmann::json* find(const std::string& key) const;
  const nlohmann::json& root_;
  std::string file_;
};

}  // namespace gsurg

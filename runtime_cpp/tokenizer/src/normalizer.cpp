// Normalizer (see normalizer.hpp).
#include "normalizer.hpp"

#include <nlohmann/json.hpp>

#include "gsurg/error.hpp"
#include "json_parts.hpp"
#include "unicode.hpp"

namespace gsurg {

void Normalizer::load(const nlohmann::json& root) {
  steps_.clear();
  for (const detail::JsonPart& part : detail::flatten_parts(root, "normalizer", "normalizers")) {
    const std::string type = detail::type_of(part.value);
    if (type == "NFC") {
      steps_.push_back(Step{Step::kNfc, "", ""});
    } else if (type == "Prepend") {
      steps_.push_back(Step{Step::kPrepend, detail::required_string(part, "prepend"), ""});
    } else if (type == "Replace") {
      Step step{Step::kReplace, detail::pattern_text(part, nullptr), detail::required_string(part, "content")};
      if (step.text.empty()) throw Error(part.path + ": Replace with an empty pattern is not supported");
      steps_.push_back(std::move(step));
    } else {
      throw Error(part.path + ": normalizer \"" + type +
                  "\" is not supported (only NFC, Prepend, and Replace with a String pattern)");
    }
  }
}

std::string replace_all(std::string_view text, const std::string& from, const std::string& to) {
  std::string out;
  size_t done = 0;
  for (size_t at = text.find(from); at != std::string_view::npos; at = text.find(from, done)) {
    out.append(text.substr(done, at - done)).append(to);
    done = at + from.size();
  }
  return out.append(text.substr(done));
}

std::string Normalizer::apply(std::string_view valid) const {
  std::string text(valid);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::kNfc: {
        std::string out;
        uni::nfc(text, out);
        text.swap(out);
        break;
      }
      case Step::kPrepend:
        if (!text.empty()) text.insert(0, step.text);
        break;
      case Step::kReplace:
        text = replace_all(text, step.text, step.content);
        break;
    }
  }
  return text;
}

}  // namespace gsurg

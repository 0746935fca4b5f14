// SentencePiece-style pre-tokenizers (see metaspace.hpp).
#include "metaspace.hpp"

#include <nlohmann/json.hpp>

#include "gsurg/error.hpp"
#include "json_parts.hpp"
#include "normalizer.hpp"
#include "utf8.hpp"

namespace gsurg {

namespace {

using nlohmann::json;

bool is_ascii_alnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

}  // namespace

std::vector<std::string> regex_literals(const std::string& regex) {
  static const std::string kSyntax = ".^$|?*+()[]{}\\";
  std::vector<std::string> out(1);
  for (size_t i = 0; i < regex.size(); ++i) {
    const char c = regex[i];
    if (c == '|') {
      out.emplace_back();
    } else if (c == '\\') {
      // an escaped ASCII punctuation or space character is itself (re.escape); \d, \w, \n ... are classes or
      // escapes of the regex language
      const bool punctuation = i + 1 < regex.size() && static_cast<unsigned char>(regex[i + 1]) < 0x80 &&
                               !is_ascii_alnum(regex[i + 1]);
      if (!punctuation)
        throw Error("the regex \"" + regex + "\" is not an alternation of literals (escape at byte " +
                    std::to_string(i) + ")");
      out.back() += regex[++i];
    } else if (kSyntax.find(c) != std::string::npos) {
      throw Error("the regex \"" + regex + "\" is not an alternation of literals ('" + std::string(1, c) +
                  "' at byte " + std::to_string(i) + ")");
    } else {
      out.back() += c;
    }
  }
  for (const std::string& literal : out) {
    if (literal.empty()) throw Error("the regex \"" + regex + "\" has an empty alternative");
  }
  return out;
}

void SpmPreTokenizer::load(const json& root) {
  steps_.clear();
  replacement_.clear();
  for (const detail::JsonPart& part : detail::flatten_parts(root, "pre_tokenizer", "pretokenizers")) {
    const std::string type = detail::type_of(part.value);
    const json& v = part.value;
    Step step;
    step.kind = type == "Metaspace" ? Step::kMetaspace : Step::kSplit;
    if (type == "Metaspace") {
      if (!replacement_.empty()) throw Error(part.path + ": a second Metaspace is not supported");
      replacement_ = detail::required_string(part, "replacement");
      if (!utf8::is_one_character(replacement_))
        throw Error(part.path + ": Metaspace replacement is not one character");
      const json scheme_json = v.value("prepend_scheme", json());
      const std::string scheme = scheme_json.is_string() ? scheme_json.get<std::string>() : "always";
      if (scheme == "always") {
        step.scheme = Step::kAlways;
      } else if (scheme == "first") {
        step.scheme = Step::kFirst;
      } else if (scheme == "never") {
        step.scheme = Step::kNever;
      } else {
        throw Error(part.path + ": Metaspace prepend_scheme \"" + scheme + "\" is not always, first or never");
      }
      if (v.contains("add_prefix_space") && v["add_prefix_space"] == false) {
        if (step.scheme != Step::kNever)
          throw Error(part.path + ": Metaspace add_prefix_space false contradicts prepend_scheme " + scheme);
      }
      step.split = !(v.contains("split") && v["split"] == false);  // absent or null: true, as HF
    } else if (type == "Split") {
      bool regex = false;
      const std::string pattern = detail::pattern_text(part, &regex);
      if (v.value("behavior", std::string()) != "Isolated" || v.value("invert", false))
        throw Error(part.path + ": Split is supported with behavior \"Isolated\" and invert false only");
      try {
        step.literals = regex ? regex_literals(pattern) : std::vector<std::string>{pattern};
      } catch (const Error& err) {
        throw Error(part.path + ": Split: " + err.what());
      }
      if (step.literals.front().empty()) throw Error(part.path + ": Split with an empty pattern");
    } else {
      throw Error(part.path + ": pre_tokenizer \"" + type +
                  "\" is not supported with this decoder (only Metaspace and Split on literals; ByteLevel "
                  "files use Qwen2's pre-tokenizer)");
    }
    steps_.push_back(std::move(step));
  }
}

void SpmPreTokenizer::split(std::string_view text, bool at_start, std::vector<std::string>& out) const {
  if (text.empty()) return;
  std::vector<Piece> pieces{Piece{std::string(text), at_start}}, next;
  for (const Step& step : steps_) {
    next.clear();
    for (Piece& piece : pieces) {
      if (step.kind == Step::kMetaspace) {
        metaspace(step, std::move(piece), next);
      } else {
        isolate(step, piece, next);
      }
    }
    pieces.swap(next);
  }
  for (Piece& piece : pieces) out.push_back(std::move(piece.text));
}

void SpmPreTokenizer::metaspace(const Step& step, Piece piece, std::vector<Piece>& out) const {
  std::string text = replace_all(piece.text, " ", replacement_);
  const bool prepend = step.scheme == Step::kAlways || (step.scheme == Step::kFirst && piece.at_start);
  if (prepend && text.compare(0, replacement_.size(), replacement_) != 0) text.insert(0, replacement_);
  if (!step.split) {
    out.push_back(Piece{std::move(text), piece.at_start});
    return;
  }
  size_t begin = 0;  // each replacement starts a new piece
  for (size_t at = text.find(replacement_, 1); at != std::string::npos; at = text.find(replacement_, at + 1)) {
    if (at > begin) out.push_back(Piece{text.substr(begin, at - begin), piece.at_start && begin == 0});
    begin = at;
  }
  out.push_back(Piece{text.substr(begin), piece.at_start && begin == 0});
}

void SpmPreTokenizer::isolate(const Step& step, const Piece& piece, std::vector<Piece>& out) {
  const std::string& text = piece.text;
  size_t gap = 0;  // start of the text not yet emitted
  size_t pos = 0;
  while (pos < text.size()) {
    const std::string* hit = nullptr;
    for (const std::string& literal : step.literals) {
      if (text.compare(pos, literal.size(), literal) == 0) {
        hit = &literal;
        break;
      }
    }
    if (!hit) {
      ++pos;
      continue;
    }
    if (pos > gap) out.push_back(Piece{text.substr(gap, pos - gap), piece.at_start && gap == 0});
    out.push_back(Piece{*hit, piece.at_start && pos == 0});
    pos += hit->size();
    gap = pos;
  }
  if (gap < text.size()) out.push_back(Piece{text.substr(gap), piece.at_start && gap == 0});
}

}  // namespace gsurg

// The normalizer of tokenizer.json as HF tokenizers applies it: a list of steps run in order over the text
// of each piece between added tokens (and over the content of a normalized added token).
//
// Supported steps: NFC; Prepend(p), which puts p in front of non-empty text; Replace with a {"String": s}
// pattern, every non-overlapping occurrence of s from the left replaced by "content" (s non-empty). The
// legacy SentencePiece form transformers' LlamaConverter writes is
// Sequence[Prepend("▁"), Replace(" ", "▁")].
// Anything else (NFKC, Lowercase, a Regex pattern, ...) is refused with its JSON path.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gsurg {

class Normalizer {
 public:
  // Reads the "normalizer" slot of the document (absent or null: no steps); throws gsurg::Error("<path>:
  // <why>") for an unsupported step.
  void load(const nlohmann::json& root);

  // The normalized form of valid UTF-8 text (a copy when there are no steps).
  std::string apply(std::string_view valid) const;

 private:
  struct Step {
    enum Kind { kNfc, kPrepend, kReplace } kind;
    std::string text, content;  // Prepend: text; Replace: text -> content
  };
  std::vector<Step> steps_;
};

// text with every non-overlapping occurrence of `from` (non-empty), searched from the left, replaced by `to`.
std::string replace_all(std::string_view text, const std::string& from, const std::string& to);

}  // namespace gsurg

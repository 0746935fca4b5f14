// The SentencePiece-style pre-tokenizers of tokenizer.json, as HF tokenizers runs them: a list of steps, each
// turning every piece of text into one or more pieces (empty pieces dropped), in order.
//
//   Metaspace {replacement r (one character), prepend_scheme, split}: every " " becomes r; r is put in
//     front of a piece that does not start with it - always, never, or "first": only the piece that starts
//     the input text (HF: the piece whose offset in the original text is 0); with split, the piece is cut
//     before every r (each r starts a new piece, HF's MergedWithNext). The older {"add_prefix_space": b}
//     spelling is read as HF reads it (false means "never"; false with another scheme is refused).
//   Split {pattern, behavior "Isolated", invert false}: every match is its own piece, and so is the text
//     between matches. The pattern is {"String": s} or a {"Regex": ...} that is an alternation of literals
//     ("<a>|<b>", the form transformers writes for SentencePiece user-defined pieces, Python re.escape
//     escapes allowed), matched as Oniguruma matches it: the leftmost position first, and there the first
//     alternative that matches.
//
// No pre-tokenizer (null) leaves each piece whole. Anything else is refused with its JSON path.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gsurg {

class SpmPreTokenizer {
 public:
  // Reads the "pre_tokenizer" slot; throws gsurg::Error("<path>: <why>").
  void load(const nlohmann::json& root);

  // Appends the pieces of `text` (valid UTF-8); at_start: `text` begins at offset 0 of the input.
  void split(std::string_view text, bool at_start, std::vector<std::string>& out) const;

 private:
  struct Step {
    enum Kind { kMetaspace, kSplit } kind = kMetaspace;
    enum Scheme { kAlways, kFirst, kNever } scheme = kAlways;  // Metaspace
    bool split = true;                                         // Metaspace
    std::vector<std::string> literals;                         // Split: the alternatives, in order
  };
  struct Piece {
    std::string text;
    bool at_start;
  };
  void metaspace(const Step& step, Piece piece, std::vector<Piece>& out) const;
  static void isolate(const Step& step, const Piece& piece, std::vector<Piece>& out);

  std::vector<Step> steps_;
  std::string replacement_;  // the Metaspace replacement ("" when there is none)
};

// The alternatives of a regex that is an alternation of literals ("a|b\\.c" -> {"a", "b.c"}); throws
// gsurg::Error(why) when it uses any other regex syntax or has an empty alternative.
std::vector<std::string> regex_literals(const std::string& regex);

}  // namespace gsurg

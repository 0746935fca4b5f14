// The SentencePiece-style decoders of tokenizer.json, run as HF tokenizers runs its decoder chain over the
// tokens of the ids (vocabulary tokens, added tokens' contents; unknown ids dropped first), one token at a
// time so that a stream gives the same text:
//
//   1. per token, in file order: Replace {"String": s} -> content (every occurrence), Metaspace (every
//      replacement character becomes " ", or nothing in the first token unless prepend_scheme is "never");
//   2. ByteFallback: a token that then reads "<0xNN>" (HF: 6 bytes, 2 hex digits for Rust's
//      u8::from_str_radix) is byte NN; a run of such tokens becomes its UTF-8 text, or one U+FFFD per byte
//      of the run when the run is not valid UTF-8 as a whole;
//   3. Fuse (joining: the result is the same without it);
//   4. Strip {content c, start n, stop 0} after Fuse: up to n leading characters c of the whole text removed.
//
// Accepted: those steps in that order (each optional, at most one Metaspace), alone or as a Sequence, e.g.
// the legacy Sequence[Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0)] and a lone Metaspace. No
// decoder at all is refused (HF would join the tokens with spaces).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gsurg/tokenizer.hpp"

namespace gsurg {

class SpmDecoder {
 public:
  // Reads the "decoder" slot; throws gsurg::Error("<path>: <why>") for anything else.
  void load(const nlohmann::json& root);

  // The text `token` adds to a stream in `state` (held back while it is part of a byte run), and the
  // text that ends the stream (a pending run); both leave `state` ready for what follows.
  std::string push(const std::string& token, detail::StreamState& state) const;
  std::string finish(detail::StreamState& state) const;

  // The token after step 1, as a token that is not the first: "<0xNN>" tokens as their byte.
  std::string piece(const std::string& token) const;

 private:
  struct Replace {
    std::string from, to;  // Metaspace: from = its replacement character, to = " "
    bool metaspace = false;
  };
  std::string step1(const std::string& token, bool first) const;
  std::string emit(const std::string& text, detail::StreamState& state) const;
  std::string flush_run(detail::StreamState& state) const;

  std::vector<Replace> replaces_;
  bool metaspace_strips_first_ = false;  // a Metaspace whose prepend_scheme is not "never"
  bool byte_fallback_ = false;
  std::string strip_char_;  // "" when there is no Strip
  size_t strip_start_ = 0;
};

// The byte a ByteFallback token stands for ("<0x41>" -> 0x41), or -1.
int byte_token_value(const std::string& token);

}  // namespace gsurg

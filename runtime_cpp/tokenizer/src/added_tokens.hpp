// Added tokens ("added_tokens" of tokenizer.json) and how HF's AddedVocabulary finds them in text:
// leftmost-longest matching of the token contents, then the single_word / lstrip / rstrip rules.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gsurg {

struct AddedToken {
  std::string content;
  int id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

// One piece of a split: an added token (id >= 0) or text still to be tokenized (id == -1).
struct Piece {
  int id;
  size_t begin, end;  // bytes
};

// A set of patterns matched leftmost-longest, like the Aho-Corasick automaton HF builds.
class TokenMatcher {
 public:
  void add(const std::string& pattern, size_t token_index);
  bool empty() const { return nodes_.size() <= 1; }
  // Longest pattern starting at text[pos]: its length (0 when none) and its token index.
  size_t longest_at(std::string_view text, size_t pos, size_t& token_index) const;

 private:
  struct Node {
    long token = -1;  // token index when a pattern ends here
  };
  std::vector<Node> nodes_{Node{}};
  std::unordered_map<uint64_t, uint32_t> edges_;  // (node << 8 | byte) -> child
  bool first_byte_[256] = {};
};

class AddedVocabulary {
 public:
  // tokens with their final ids; normalized_content[i] is token i's NFC (used when it is normalized).
  void build(std::vector<AddedToken> tokens, const std::vector<std::string>& normalized_content);

  // HF's find_matches over `text` with the non-normalized tokens (raw pass) or the normalized ones.
  std::vector<Piece> split(std::string_view text, bool normalized_pass) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<AddedToken> tokens_;
  TokenMatcher raw_, normalized_;
};

}  // namespace gsurg

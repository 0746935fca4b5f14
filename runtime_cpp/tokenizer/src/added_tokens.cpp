// Added-token matching (see added_tokens.hpp). The whitespace and word tests are those of the Rust regex
// crate's \s and \w that HF's AddedVocabulary uses (`\s*$`, `^\s*`, `\w$`, `^\w`).
#include "added_tokens.hpp"

#include "unicode.hpp"
#include "utf8.hpp"

namespace gsurg {

void TokenMatcher::add(const std::string& pattern, size_t token_index) {
  if (pattern.empty()) return;
  uint32_t node = 0;
  for (char ch : pattern) {
    const auto b = static_cast<unsigned char>(ch);
    const uint64_t k = (static_cast<uint64_t>(node) << 8) | b;
    auto it = edges_.find(k);
    if (it == edges_.end()) {
      nodes_.push_back(Node{});
      it = edges_.emplace(k, static_cast<uint32_t>(nodes_.size() - 1)).first;
    }
    node = it->second;
  }
  nodes_[node].token = static_cast<long>(token_index);  // a repeated pattern keeps the last token
  first_byte_[static_cast<unsigned char>(pattern[0])] = true;
}

size_t TokenMatcher::longest_at(std::string_view text, size_t pos, size_t& token_index) const {
  if (!first_byte_[static_cast<unsigned char>(text[pos])]) return 0;
  uint32_t node = 0;
  size_t best = 0;
  for (size_t k = pos; k < text.size(); ++k) {
    auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[k]));
    if (it == edges_.end()) break;
    node = it->second;
    if (nodes_[node].token >= 0) {
      best = k + 1 - pos;
      token_index = static_cast<size_t>(nodes_[node].token);
    }
  }
  return best;
}

void AddedVocabulary::build(std::vector<AddedToken> tokens, const std::vector<std::string>& normalized_content) {
  tokens_ = std::move(tokens);
  for (size_t k = 0; k < tokens_.size(); ++k) {
    if (tokens_[k].normalized) {
      normalized_.add(normalized_content[k], k);
    } else {
      raw_.add(tokens_[k].content, k);
    }
  }
}

namespace {

// The code point ending at byte `end` of valid UTF-8 text (end > 0).
char32_t cp_before(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return utf8::scan(text, start).cp;
}

size_t start_of_trailing_space(std::string_view text, size_t end) {
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    if (!uni::is_white_space(utf8::scan(text, start).cp)) break;
    end = start;
  }
  return end;
}

size_t end_of_leading_space(std::string_view text, size_t begin) {
  while (begin < text.size()) {
    const utf8::Unit u = utf8::scan(text, begin);
    if (!uni::is_white_space(u.cp)) break;
    begin += u.length;
  }
  return begin;
}

}  // namespace

std::vector<Piece> AddedVocabulary::split(std::string_view text, bool normalized_pass) const {
  std::vector<Piece> pieces;
  const TokenMatcher& matcher = normalized_pass ? normalized_ : raw_;
  if (matcher.empty() || text.empty()) {
    if (!text.empty()) pieces.push_back(Piece{-1, 0, text.size()});
    return pieces;
  }
  size_t start_offset = 0;  // end of the last accepted token
  size_t pos = 0;           // where the leftmost-longest search continues
  while (pos < text.size()) {
    size_t index = 0;
    const size_t len = matcher.longest_at(text, pos, index);
    if (len == 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + len;
    pos = stop;
    const AddedToken& tok = tokens_[index];
    if (tok.single_word) {
      const bool start_space = start == 0 || !uni::is_word(cp_before(text, start));
      const bool stop_space = stop == text.size() || !uni::is_word(utf8::scan(text, stop).cp);
      if (!start_space || !stop_space) continue;
    }
    if (tok.lstrip) {
      const size_t s = start_of_trailing_space(text, start);
      start = s > start_offset ? s : start_offset;
    }
    if (tok.rstrip) stop = end_of_leading_space(text, stop);
    if (start_offset < start) pieces.push_back(Piece{-1, start_offset, start});
    pieces.push_back(Piece{tok.id, start, stop});
    start_offset = stop;
  }
  if (start_offset != text.size()) pieces.push_back(Piece{-1, start_offset, text.size()});
  return pieces;
}

}  // namespace gsurg

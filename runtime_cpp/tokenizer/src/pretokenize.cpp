// The Qwen2 split (see pretokenize.hpp). At each position the alternatives are tried in the regex's order
// with Oniguruma's leftmost-first, backtracking semantics; each function below returns the end of its
// alternative's match at position i, or i when it does not match. Derivations of the backtracking:
//   2. [^\r\n\p{L}\p{N}]?\p{L}+  - optional non-letter/number/CR/LF, then the maximal run of letters;
//   4.  ?[^\s\p{L}\p{N}]+[\r\n]* - optional ASCII space, maximal run of "other", then CR/LF run;
//   5. \s*[\r\n]+                - \s* backtracks to the last CR/LF of the whitespace run starting at i;
//   6. \s+(?!\S)                 - the whole run at the end of text, else the run minus its last char;
//   7. \s+                       - the whole run.
// (?i:...) matches ASCII case variants, and Oniguruma's case folding also lets U+017F (long s) match s.
#include "pretokenize.hpp"

#include <vector>

#include "unicode.hpp"
#include "utf8.hpp"

namespace gsurg {

const char* const kQwen2SplitRegex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

namespace {

enum Class : unsigned char { kLetter, kNumber, kSpace, kOther };

class Matcher {
 public:
  explicit Matcher(std::string_view text) {
    utf8::decode(text, cps_, offsets_);
    cls_.reserve(cps_.size());
    for (char32_t cp : cps_) {
      cls_.push_back(uni::is_letter(cp)   ? kLetter
                     : uni::is_number(cp) ? kNumber
                     : uni::is_white_space(cp) ? kSpace
                                               : kOther);
    }
  }

  std::vector<std::pair<size_t, size_t>> split() const {
    std::vector<std::pair<size_t, size_t>> pieces;
    const size_t n = cps_.size();
    size_t gap = 0;  // start of text not covered by a match yet
    size_t i = 0;
    while (i < n) {
      const size_t end = match_at(i);
      if (end == i) {  // no match here: the regex search moves on, this char joins the gap
        ++i;
        continue;
      }
      if (gap < i) pieces.emplace_back(offsets_[gap], offsets_[i]);
      pieces.emplace_back(offsets_[i], offsets_[end]);
      i = gap = end;
    }
    if (gap < n) pieces.emplace_back(offsets_[gap], offsets_[n]);
    return pieces;
  }

 private:
  size_t size() const { return cps_.size(); }
  bool is_crlf(size_t k) const { return cps_[k] == '\r' || cps_[k] == '\n'; }

  size_t match_at(size_t i) const {
    size_t e;
    if ((e = contraction(i)) != i) return e;
    if ((e = letters(i)) != i) return e;
    if (cls_[i] == kNumber) return i + 1;
    if ((e = others(i)) != i) return e;
    return spaces(i);
  }

  // 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
  size_t contraction(size_t i) const {
    if (cps_[i] != '\'' || i + 1 >= size()) return i;
    auto lower = [&](size_t k) -> char32_t {
      if (k >= size()) return 0;
      const char32_t c = cps_[k];
      if (c == 0x17F) return 's';  // LATIN SMALL LETTER LONG S folds to s
      return (c >= 'A' && c <= 'Z') ? c + 0x20 : c;
    };
    const char32_t a = lower(i + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    const char32_t b = lower(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return i;
  }

  // 2. [^\r\n\p{L}\p{N}]?\p{L}+
  size_t letters(size_t i) const {
    size_t k = i;
    if (cls_[k] != kLetter) {
      if (cls_[k] == kNumber || is_crlf(k)) return i;
      ++k;
      if (k >= size() || cls_[k] != kLetter) return i;
    }
    while (k < size() && cls_[k] == kLetter) ++k;
    return k;
  }

  // 4.  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t others(size_t i) const {
    size_t k = i;
    if (cps_[k] == ' ' && k + 1 < size() && cls_[k + 1] == kOther) ++k;
    if (cls_[k] != kOther) return i;
    while (k < size() && cls_[k] == kOther) ++k;
    while (k < size() && is_crlf(k)) ++k;
    return k;
  }

  // 5. \s*[\r\n]+ , 6. \s+(?!\S) , 7. \s+
  size_t spaces(size_t i) const {
    if (cls_[i] != kSpace) return i;
    size_t run = i;
    size_t last_crlf = size();  // none
    while (run < size() && cls_[run] == kSpace) {
      if (is_crlf(run)) last_crlf = run;
      ++run;
    }
    if (last_crlf != size()) return last_crlf + 1;
    if (run == size()) return run;
    if (run - i >= 2) return run - 1;
    return run;
  }

  std::vector<char32_t> cps_;
  std::vector<size_t> offsets_;
  std::vector<Class> cls_;
};

}  // namespace

std::vector<std::pair<size_t, size_t>> qwen2_split(std::string_view text) {
  if (text.empty()) return {};
  return Matcher(text).split();
}

}  // namespace gsurg

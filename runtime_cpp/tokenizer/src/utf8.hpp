// UTF-8 scanning for the tokenizer: one scanner that tells a valid character from a maximal invalid
// subpart (the unit that becomes one U+FFFD in Rust's String::from_utf8_lossy, Python's
// bytes.decode("utf-8", "replace") and the WHATWG decoder) and from a valid but incomplete tail.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gsurg {
namespace utf8 {

constexpr char32_t kReplacement = 0xFFFD;

// What starts at s[i] (i < s.size()).
struct Unit {
  enum Kind { kChar, kInvalid, kIncomplete } kind;
  size_t length;   // bytes: the character, the invalid subpart, or the incomplete tail (which ends at s.end())
  char32_t cp;     // the code point when kind == kChar
};
Unit scan(std::string_view s, size_t i);

// Appends the UTF-8 encoding of cp (cp must be a Unicode scalar value).
void append(std::string& out, char32_t cp);

// The lossy decoding of bytes: every invalid subpart and an incomplete tail become U+FFFD.
std::string repair(std::string_view bytes);

// True when bytes are valid UTF-8 (no repair needed).
bool is_valid(std::string_view bytes);

// True when bytes are exactly one valid UTF-8 character (a JSON "char" field of tokenizer.json).
bool is_one_character(std::string_view bytes);

// The length of the longest prefix that does not end inside an incomplete (but still possibly valid)
// sequence: repair(bytes.substr(0, n)) + repair(bytes.substr(n)) == repair(bytes).
size_t complete_prefix(std::string_view bytes);

// Code points of valid UTF-8 text, with offsets[k] = byte offset of code point k and
// offsets[size] = text.size().
void decode(std::string_view valid, std::vector<char32_t>& cps, std::vector<size_t>& offsets);

}  // namespace utf8
}  // namespace gsurg

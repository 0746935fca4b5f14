// UTF-8 scanning (see utf8.hpp). The accepted sequences are those of the Unicode Standard's Table 3-7
// (well-formed UTF-8 byte sequences); a maximal subpart is the longest prefix of such a sequence.
#include "utf8.hpp"

namespace gsurg {
namespace utf8 {

namespace {

inline bool in(unsigned char b, unsigned lo, unsigned hi) { return b >= lo && b <= hi; }

}  // namespace

Unit scan(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {Unit::kChar, 1, b0};
  size_t need;        // continuation bytes after b0
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
  char32_t cp;
  if (in(b0, 0xC2, 0xDF)) {
    need = 1;
    cp = b0 & 0x1Fu;
  } else if (in(b0, 0xE0, 0xEF)) {
    need = 2;
    cp = b0 & 0x0Fu;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (in(b0, 0xF0, 0xF4)) {
    need = 3;
    cp = b0 & 0x07u;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Unit::kInvalid, 1, 0};
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return {Unit::kIncomplete, k, 0};
    const auto b = static_cast<unsigned char>(s[i + k]);
    const bool ok = k == 1 ? in(b, lo, hi) : in(b, 0x80, 0xBF);
    if (!ok) return {Unit::kInvalid, k, 0};
    cp = (cp << 6) | (b & 0x3Fu);
  }
  return {Unit::kChar, need + 1, cp};
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string repair(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const Unit u = scan(bytes, i);
    if (u.kind == Unit::kChar) {
      out.append(bytes.data() + i, u.length);
    } else {
      append(out, kReplacement);
    }
    i += u.length;
  }
  return out;
}

bool is_valid(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const Unit u = scan(bytes, i);
    if (u.kind != Unit::kChar) return false;
    i += u.length;
  }
  return true;
}

bool is_one_character(std::string_view bytes) {
  if (bytes.empty()) return false;
  const Unit u = scan(bytes, 0);
  return u.kind == Unit::kChar && u.length == bytes.size();
}

size_t complete_prefix(std::string_view bytes) {
  // Scans from the start so every unit found is a real one (a byte is never read as the start of a
  // sequence when it belongs to the one before).
  size_t i = 0;
  while (i < bytes.size()) {
    const Unit u = scan(bytes, i);
    if (u.kind == Unit::kIncomplete) return i;
    i += u.length;
  }
  return bytes.size();
}

void decode(std::string_view valid, std::vector<char32_t>& cps, std::vector<size_t>& offsets) {
  cps.clear();
  offsets.clear();
  cps.reserve(valid.size());
  offsets.reserve(valid.size() + 1);
  size_t i = 0;
  while (i < valid.size()) {
    const Unit u = scan(valid, i);
    offsets.push_back(i);
    cps.push_back(u.kind == Unit::kChar ? u.cp : kReplacement);
    i += u.length;
  }
  offsets.push_back(valid.size());
}

}  // namespace utf8
}  // namespace gsurg

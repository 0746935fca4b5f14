// ByteLevel map (see byte_level.hpp).
#include "byte_level.hpp"

#include "utf8.hpp"

namespace gsurg {

namespace {

bool printable(unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); }

}  // namespace

ByteLevel::ByteLevel() {
  byte_of_.fill(-1);
  unsigned next = 0x100;
  for (unsigned b = 0; b < 256; ++b) {
    const char32_t cp = printable(b) ? b : next++;
    utf8::append(symbol_[b], cp);
    byte_of_[cp] = static_cast<int>(b);
  }
}

std::string ByteLevel::encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) out += symbol_[static_cast<unsigned char>(ch)];
  return out;
}

std::string ByteLevel::decode_token(std::string_view token) const {
  std::string out;
  out.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    const utf8::Unit u = utf8::scan(token, i);
    if (u.kind != utf8::Unit::kChar || u.cp >= byte_of_.size() || byte_of_[u.cp] < 0) {
      return std::string(token);
    }
    out += static_cast<char>(byte_of_[u.cp]);
    i += u.length;
  }
  return out;
}

}  // namespace gsurg

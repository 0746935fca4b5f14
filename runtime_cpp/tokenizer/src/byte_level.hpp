// The ByteLevel byte <-> character map of GPT-2 style BPE: every byte is shown as one printable code
// point (the printable Latin-1 bytes as themselves, the others as U+0100 + their rank among the others),
// so a byte string becomes a text whose characters are the BPE's initial symbols.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace gsurg {

class ByteLevel {
 public:
  ByteLevel();

  // The UTF-8 of the character standing for byte b.
  const std::string& symbol(unsigned char b) const { return symbol_[b]; }

  // bytes -> their ByteLevel text.
  std::string encode(std::string_view bytes) const;

  // A token's bytes as HF's ByteLevel decoder gives them: when every character of the token is a
  // ByteLevel character, the bytes they stand for; otherwise (e.g. an added token with a space or CJK)
  // the token's own UTF-8. The token must be valid UTF-8.
  std::string decode_token(std::string_view token) const;

 private:
  std::array<std::string, 256> symbol_;
  std::array<int, 512> byte_of_;  // code point (< 512) -> byte, or -1
};

}  // namespace gsurg

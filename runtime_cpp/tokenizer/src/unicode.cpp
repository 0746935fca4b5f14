// utf8proc-backed character classes and NFC (see unicode.hpp).
#include "unicode.hpp"

#include <utf8proc.h>

#include <vector>

#include "gsurg/error.hpp"
#include "utf8.hpp"

namespace gsurg {
namespace uni {

namespace {

inline utf8proc_category_t category(char32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

bool ascii_letter(char32_t cp) { return (cp | 0x20u) >= 'a' && (cp | 0x20u) <= 'z'; }

}  // namespace

bool is_letter(char32_t cp) {
  if (cp < 0x80) return ascii_letter(cp);
  const auto c = category(cp);
  return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}

bool is_number(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const auto c = category(cp);
  return c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
}

bool is_white_space(char32_t cp) {
  // The White_Space property (PropList.txt), unchanged since Unicode 6.3.
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  if (cp == 0x85 || cp == 0xA0 || cp == 0x1680) return true;
  if (cp >= 0x2000 && cp <= 0x200A) return true;
  return cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_word(char32_t cp) {
  if (cp < 0x80) return ascii_letter(cp) || (cp >= '0' && cp <= '9') || cp == '_';
  const auto c = category(cp);
  if (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_ME) return true;  // letters and marks
  if (c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_PC) return true;
  if (cp == 0x200C || cp == 0x200D) return true;  // Join_Control
  // Other_Alphabetic symbols (circled / squared Latin letters).
  return (cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
         (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189);
}

void nfc(std::string_view valid, std::string& out) {
  bool ascii = true;
  for (char ch : valid) {
    if (static_cast<unsigned char>(ch) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) {  // ASCII is its own NFC
    out.append(valid.data(), valid.size());
    return;
  }
  const auto options = static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  const auto* src = reinterpret_cast<const utf8proc_uint8_t*>(valid.data());
  const auto len = static_cast<utf8proc_ssize_t>(valid.size());
  std::vector<utf8proc_int32_t> buffer(valid.size() + 8);
  utf8proc_ssize_t n = 0;
  for (;;) {  // canonical decomposition + ordering; retried once when the buffer was too small
    n = utf8proc_decompose(src, len, buffer.data(), static_cast<utf8proc_ssize_t>(buffer.size()), options);
    if (n < 0) throw Error(std::string("NFC: ") + utf8proc_errmsg(n));
    if (static_cast<size_t>(n) <= buffer.size()) break;
    buffer.resize(static_cast<size_t>(n));
  }
  n = utf8proc_normalize_utf32(buffer.data(), n, options);  // canonical composition
  if (n < 0) throw Error(std::string("NFC: ") + utf8proc_errmsg(n));
  out.reserve(out.size() + valid.size());
  for (utf8proc_ssize_t k = 0; k < n; ++k) utf8::append(out, static_cast<char32_t>(buffer[static_cast<size_t>(k)]));
}

const char* unicode_version() { return utf8proc_unicode_version(); }

}  // namespace uni
}  // namespace gsurg

// The Unicode facts the tokenizer needs, from utf8proc: the character classes of Qwen2's pre-tokenizer
// regex as Oniguruma (HF tokenizers' regex engine) defines them, the \w and \s of Rust's regex crate
// (used by HF for the single_word / lstrip / rstrip flags of added tokens), and NFC.
//
// The classes follow utf8proc's Unicode version (utf8proc_unicode_version()); HF's wheels may embed a
// newer one (Oniguruma) or an older one (its NFC tables), so characters assigned in between are classified
// as the local utf8proc knows them.
#pragma once

#include <string>
#include <string_view>

namespace gsurg {
namespace uni {

bool is_letter(char32_t cp);       // \p{L}: Lu Ll Lt Lm Lo
bool is_number(char32_t cp);       // \p{N}: Nd Nl No
bool is_white_space(char32_t cp);  // \s of Oniguruma and of Rust's regex: the White_Space property
bool is_word(char32_t cp);         // Rust regex \w: Alphabetic, marks, Nd, Pc, Join_Control

// NFC of valid UTF-8 text (appended to out). Throws gsurg::Error if utf8proc reports an error.
void nfc(std::string_view valid, std::string& out);

// utf8proc's Unicode version, e.g. "15.0.0".
const char* unicode_version();

}  // namespace uni
}  // namespace gsurg

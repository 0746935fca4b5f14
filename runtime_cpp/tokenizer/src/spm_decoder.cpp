// SentencePiece-style decoders (see spm_decoder.hpp).
#include "spm_decoder.hpp"

#include <nlohmann/json.hpp>

#include "gsurg/error.hpp"
#include "json_parts.hpp"
#include "normalizer.hpp"
#include "utf8.hpp"

namespace gsurg {

namespace {

using nlohmann::json;

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

const char kSupported[] =
    " (supported: Replace with a String pattern and Metaspace, then ByteFallback, then Fuse, then Strip with "
    "stop 0, in that order; or ByteLevel)";

}  // namespace

int byte_token_value(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  if (token[3] == '+') return hex_digit(token[4]);  // Rust's from_str_radix takes a leading '+'
  const int hi = hex_digit(token[3]), lo = hex_digit(token[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void SpmDecoder::load(const json& root) {
  *this = SpmDecoder();
  if (!root.contains("decoder") || root["decoder"].is_null())  // HF would join the tokens with spaces
    throw Error(std::string("decoder: none is not supported") + kSupported);
  enum Stage { kPerToken, kFallback, kFused, kStripped } stage = kPerToken;
  bool metaspace = false;
  for (const detail::JsonPart& part : detail::flatten_parts(root, "decoder", "decoders")) {
    const std::string type = detail::type_of(part.value);
    const json& v = part.value;
    if (type == "Replace" && stage == kPerToken) {
      Replace r{detail::pattern_text(part, nullptr), detail::required_string(part, "content")};
      if (r.from.empty()) throw Error(part.path + ": Replace with an empty pattern is not supported");
      replaces_.push_back(std::move(r));
    } else if (type == "Metaspace" && stage == kPerToken && !metaspace) {
      metaspace = true;
      Replace r{detail::required_string(part, "replacement"), " ", true};
      if (!utf8::is_one_character(r.from))
        throw Error(part.path + ": Metaspace replacement is not one character");
      const json scheme_json = v.value("prepend_scheme", json());
      const std::string scheme = scheme_json.is_string() ? scheme_json.get<std::string>() : "always";
      if (scheme != "never" && scheme != "first" && scheme != "always")
        throw Error(part.path + ": Metaspace prepend_scheme \"" + scheme + "\" is not always, first or never");
      if (v.contains("add_prefix_space") && v["add_prefix_space"] == false && scheme != "never")
        throw Error(part.path + ": Metaspace add_prefix_space false contradicts prepend_scheme " + scheme);
      metaspace_strips_first_ = scheme != "never";
      replaces_.push_back(std::move(r));
    } else if (type == "ByteFallback" && stage == kPerToken) {
      byte_fallback_ = true;
      stage = kFallback;
    } else if (type == "Fuse" && stage < kFused) {
      stage = kFused;
    } else if (type == "Strip" && stage == kFused) {
      const json content = v.value("content", json());
      const json start = v.value("start", json()), stop = v.value("stop", json());
      const bool one_char = content.is_string() && utf8::is_one_character(content.get<std::string>());
      if (!one_char || !start.is_number_unsigned() || !(stop.is_number_unsigned() && stop == 0))
        throw Error(part.path + ": Strip is supported with one content character, a start and stop 0, not " +
                    v.dump());
      strip_char_ = content.get<std::string>();
      strip_start_ = start.get<size_t>();
      stage = kStripped;
    } else {
      throw Error(part.path + ": decoder \"" + type + "\" is not supported here" + kSupported);
    }
  }
}

std::string SpmDecoder::step1(const std::string& token, bool first) const {
  std::string text = token;
  for (const Replace& r : replaces_) {
    text = replace_all(text, r.from, r.metaspace && first && metaspace_strips_first_ ? std::string() : r.to);
  }
  return text;
}

std::string SpmDecoder::piece(const std::string& token) const {
  std::string text = step1(token, false);
  const int b = byte_fallback_ ? byte_token_value(text) : -1;
  return b >= 0 ? std::string(1, static_cast<char>(b)) : text;
}

std::string SpmDecoder::flush_run(detail::StreamState& state) const {
  std::string text;
  if (utf8::is_valid(state.pending)) {
    text.swap(state.pending);
  } else {
    for (size_t k = 0; k < state.pending.size(); ++k) utf8::append(text, utf8::kReplacement);
  }
  state.pending.clear();
  return text;
}

std::string SpmDecoder::emit(const std::string& text, detail::StreamState& state) const {
  size_t i = 0;
  while (!state.started && state.stripped < strip_start_ && i < text.size() &&
         text.compare(i, strip_char_.size(), strip_char_) == 0) {
    i += strip_char_.size();
    ++state.stripped;
  }
  if (i < text.size()) state.started = true;
  return text.substr(i);
}

std::string SpmDecoder::push(const std::string& token, detail::StreamState& state) const {
  const std::string text = step1(token, state.tokens++ == 0);
  const int b = byte_fallback_ ? byte_token_value(text) : -1;
  if (b >= 0) {
    state.pending += static_cast<char>(b);
    return std::string();
  }
  return emit(flush_run(state) + text, state);
}

std::string SpmDecoder::finish(detail::StreamState& state) const {
  std::string text = emit(flush_run(state), state);
  state = detail::StreamState();
  return text;
}

}  // namespace gsurg

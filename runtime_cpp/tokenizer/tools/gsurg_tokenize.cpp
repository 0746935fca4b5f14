// gsurg_tokenize: the tokenizer's test program (used by tests/check_tokenizer.py).
//
//   gsurg_tokenize --tokenizer tokenizer.json --input in.json --output out.json [--mode encode|pretokenize]
//
// in.json is a JSON array; strings are base64 (raw bytes, so invalid UTF-8 can be passed). out.json is
// {"unicode_version": utf8proc's, "vocab_size": n, "results": [...]} with one result per element:
//   encode mode, element "b64 text" -> {"ids": [...], "decode": b64(decode(ids)),
//                "stream": [b64(push(id)) for each id..., b64(finish())], "encode_us": the encode call's time}
//   encode mode, element {"plain": "b64 text"} -> the same for encode(text, add_special_tokens = false)
//   encode mode, element {"ids": [...]} -> {"decode": ..., "stream": ...} for those ids
//   encode mode, element {"token": "b64"} -> {"id": token_id(token)}
//   pretokenize mode, element "b64 text" -> {"normalized": b64(NFC of the repaired text),
//                "pieces": [b64(piece)...]}: the Qwen2 split of the normalized text (no added tokens).
// Exit status 0 on success, 1 with a message on stderr on any error.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pretokenize.hpp"
#include "gsurg/error.hpp"
#include "gsurg/files.hpp"
#include "gsurg/tokenizer.hpp"
#include "gsurg/sanitizer_defaults.hpp"
#include "tokenizer_data.hpp"
#include "unicode.hpp"
#include "utf8.hpp"

#ifdef _WIN32
#include <windows.h>
#include <shellapi.h>
#endif

namespace {

using nlohmann::json;

const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string b64encode(const std::string& in) {
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    out += kB64[v >> 18];
    out += kB64[(v >> 12) & 63];
    out += kB64[(v >> 6) & 63];
    out += kB64[v & 63];
  }
  if (i < in.size()) {
    unsigned v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    out += kB64[v >> 18];
    out += kB64[(v >> 12) & 63];
    out += i + 1 < in.size() ? kB64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string b64decode(const std::string& in) {
  std::string out;
  unsigned acc = 0;
  int bits = 0;
  for (char ch : in) {
    if (ch == '=') break;
    const char* p = std::char_traits<char>::find(kB64, 64, ch);
    if (!p) throw gsurg::Error("input is not base64");
    acc = (acc << 6) | static_cast<unsigned>(p - kB64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

std::vector<std::string> utf8_args(int argc, char** argv) {
#ifdef _WIN32
  (void)argc;
  (void)argv;
  int n = 0;
  wchar_t** wargv = CommandLineToArgvW(GetCommandLineW(), &n);
  std::vector<std::string> args;
  for (int k = 0; k < n; ++k) {
    const int len = WideCharToMultiByte(CP_UTF8, 0, wargv[k], -1, nullptr, 0, nullptr, nullptr);
    std::string s(static_cast<size_t>(len > 0 ? len - 1 : 0), '\0');
    if (len > 1) WideCharToMultiByte(CP_UTF8, 0, wargv[k], -1, &s[0], len, nullptr, nullptr);
    args.push_back(s);
  }
  LocalFree(wargv);
  return args;
#else
  return std::vector<std::string>(argv, argv + argc);
#endif
}

json decode_one(const gsurg::Tokenizer& tok, const std::vector<int>& ids) {
  json stream = json::array();
  gsurg::StreamDecoder dec(tok);
  for (int id : ids) stream.push_back(b64encode(dec.push(id)));
  stream.push_back(b64encode(dec.finish()));
  return json{{"decode", b64encode(tok.decode(ids))}, {"stream", stream}};
}

json encode_one(const gsurg::Tokenizer& tok, const json& element) {
  if (element.is_object() && element.contains("ids")) return decode_one(tok, element["ids"].get<std::vector<int>>());
  if (element.is_object() && element.contains("token")) {
    return json{{"id", tok.token_id(b64decode(element["token"].get<std::string>()))}};
  }
  const bool plain = element.is_object() && element.contains("plain");
  const std::string text = b64decode((plain ? element["plain"] : element).get<std::string>());
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int> ids = tok.encode(text, !plain);
  const auto t1 = std::chrono::steady_clock::now();
  json result = decode_one(tok, ids);
  result["ids"] = ids;
  result["encode_us"] = std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count();
  return result;
}

json pretokenize_one(const gsurg::detail::TokenizerData& data, const std::string& text) {
  const std::string normalized = data.normalize(gsurg::utf8::repair(text));
  json pieces = json::array();
  for (const auto& p : gsurg::qwen2_split(normalized)) {
    pieces.push_back(b64encode(normalized.substr(p.first, p.second - p.first)));
  }
  return json{{"normalized", b64encode(normalized)}, {"pieces", pieces}};
}

int run(const std::vector<std::string>& args) {
  std::string tokenizer, input, output, mode = "encode";
  for (size_t k = 1; k < args.size(); ++k) {
    const std::string& a = args[k];
    if (k + 1 >= args.size()) throw gsurg::Error("missing value after " + a);
    if (a == "--tokenizer") {
      tokenizer = args[++k];
    } else if (a == "--input") {
      input = args[++k];
    } else if (a == "--output") {
      output = args[++k];
    } else if (a == "--mode") {
      mode = args[++k];
    } else {
      throw gsurg::Error("unknown option " + a);
    }
  }
  if (tokenizer.empty() || input.empty() || output.empty() || (mode != "encode" && mode != "pretokenize")) {
    throw gsurg::Error(
        "usage: gsurg_tokenize --tokenizer tokenizer.json --input in.json --output out.json "
        "[--mode encode|pretokenize]");
  }
  const json in = json::parse(gsurg::read_file(input));
  json results = json::array();
  int vocab_size = 0;
  if (mode == "encode") {
    const gsurg::Tokenizer tok = gsurg::Tokenizer::load(tokenizer);
    vocab_size = tok.vocab_size();
    for (const json& element : in) results.push_back(encode_one(tok, element));
  } else {
    gsurg::detail::TokenizerData data;
    gsurg::detail::load_tokenizer_json(tokenizer, data);
    vocab_size = static_cast<int>(data.token_bytes.size());
    for (const json& s : in) results.push_back(pretokenize_one(data, b64decode(s.get<std::string>())));
  }
  const std::string text =
      json{{"unicode_version", gsurg::uni::unicode_version()}, {"vocab_size", vocab_size}, {"results", results}}
          .dump();
  std::FILE* f = gsurg::fopen_utf8(output, "wb");
  if (!f) throw gsurg::Error(output + ": cannot write");
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) throw gsurg::Error(output + ": write failed");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(utf8_args(argc, argv));
  } catch (const std::exception& err) {
    std::cerr << "gsurg_tokenize: error: " << err.what() << "\n";
    return 1;
  }
}

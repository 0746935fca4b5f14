// Reading tokenizer.json (see tokenizer_data.hpp): checks that every part is one this implementation
// reproduces exactly (else a gsurg::Error naming the file and the part), builds the BPE model, and assigns
// added-token ids the way HF's AddedVocabulary::add_tokens does on load (the "id" fields of the file are
// only a hint there too).
#include <nlohmann/json.hpp>

#include <map>
#include <memory>

#include "pretokenize.hpp"
#include "gsurg/error.hpp"
#include "gsurg/files.hpp"
#include "tokenizer_data.hpp"
#include "tokenizer_json.hpp"
#include "unicode.hpp"

namespace gsurg {
namespace detail {

namespace {

using nlohmann::json;

std::string type_of(const json& j) { return j.is_object() ? j.value("type", std::string("?")) : "?"; }

// Flattens {"type": "Sequence", key: [...]} into its members.
std::vector<json> flatten(const json& j, const char* key) {
  std::vector<json> out;
  if (j.is_null()) return out;
  if (type_of(j) == "Sequence" && j.contains(key) && j[key].is_array()) {
    for (const json& m : j[key]) {
      for (json& x : flatten(m, key)) out.push_back(std::move(x));
    }
  } else {
    out.push_back(j);
  }
  return out;
}

bool nfc_normalizer(const json& root) {
  const auto parts = flatten(root.value("normalizer", json()), "normalizers");
  bool nfc = false;
  for (const json& n : parts) {
    if (type_of(n) != "NFC") throw Error("normalizer \"" + type_of(n) + "\" is not supported (only NFC)");
    nfc = true;
  }
  return nfc;
}

void check_pre_tokenizer(const json& root) {
  const auto parts = flatten(root.value("pre_tokenizer", json()), "pretokenizers");
  const std::string expected =
      "the Qwen2 pre-tokenizer (Split with Qwen2's regex, behavior Isolated, then ByteLevel with "
      "add_prefix_space and use_regex false)";
  bool ok = parts.size() == 2 && type_of(parts[0]) == "Split" && type_of(parts[1]) == "ByteLevel";
  if (ok) {
    const json& split = parts[0];
    const json pattern = split.value("pattern", json());
    ok = pattern.is_object() && pattern.value("Regex", std::string()) == kQwen2SplitRegex &&
         split.value("behavior", std::string()) == "Isolated" && !split.value("invert", false);
    const json& bl = parts[1];
    ok = ok && !bl.value("add_prefix_space", true) && !bl.value("use_regex", true);
  }
  if (!ok) throw Error("pre_tokenizer is not supported: expected " + expected);
}

// The ids one SpecialToken piece of a TemplateProcessing adds: its entry in "special_tokens".
std::vector<int> template_special(const json& processor, const json& piece) {
  const std::string name = piece.at("id").get<std::string>();
  const json specials = processor.value("special_tokens", json::object());
  if (!specials.is_object() || !specials.contains(name))
    throw Error("post_processor TemplateProcessing: special token \"" + name + "\" is not in special_tokens");
  const json& ids = specials[name].at("ids");
  if (!ids.is_array()) throw Error("post_processor TemplateProcessing: special_tokens \"" + name + "\" ids");
  std::vector<int> out;
  for (const json& id : ids) {
    if (!id.is_number_unsigned() || id.get<unsigned long long>() > 0x7FFFFFFFull)
      throw Error("post_processor TemplateProcessing: special_tokens \"" + name + "\" has an id " +
                  id.dump() + " that is not a token id");
    out.push_back(id.get<int>());
  }
  return out;
}

// A TemplateProcessing's "single" template as HF applies it to one sequence (add_special_tokens): the
// ids of the special tokens before $A, then the sequence, then those after it. The "pair" template is
// never used: the tokenizer encodes one sequence at a time.
void read_template(const json& processor, TokenizerData& data) {
  const json single = processor.value("single", json());
  if (!single.is_array()) throw Error("post_processor TemplateProcessing: \"single\" is not a list");
  int sequences = 0;
  for (const json& piece : single) {
    if (piece.is_object() && piece.size() == 1 && piece.contains("Sequence")) {
      if (piece["Sequence"].value("id", std::string()) != "A")
        throw Error("post_processor TemplateProcessing: the single template names a sequence other than $A");
      ++sequences;
    } else if (piece.is_object() && piece.size() == 1 && piece.contains("SpecialToken")) {
      std::vector<int>& side = sequences == 0 ? data.template_prefix : data.template_suffix;
      for (int id : template_special(processor, piece["SpecialToken"])) side.push_back(id);
    } else {
      throw Error("post_processor TemplateProcessing: a single template piece is neither Sequence nor "
                  "SpecialToken: " + piece.dump());
    }
  }
  if (sequences != 1)
    throw Error("post_processor TemplateProcessing: the single template must hold $A exactly once, not " +
                std::to_string(sequences) + " times");
}

void check_post_processor_and_decoder(const json& root, TokenizerData& data) {
  int templates = 0;
  for (const json& p : flatten(root.value("post_processor", json()), "processors")) {
    if (type_of(p) == "TemplateProcessing" && templates++ == 0) {
      read_template(p, data);
    } else if (type_of(p) != "ByteLevel") {  // ByteLevel only trims offsets: the ids are unchanged
      throw Error("post_processor \"" + type_of(p) +
                  "\" is not supported (only ByteLevel, one TemplateProcessing, or none)");
    }
  }
  const json decoder = root.value("decoder", json());
  if (type_of(decoder) != "ByteLevel") {
    throw Error("decoder \"" + type_of(decoder) + "\" is not supported (only ByteLevel)");
  }
}

bool same_token(const AddedToken& a, const AddedToken& b) {
  return a.content == b.content && a.single_word == b.single_word && a.lstrip == b.lstrip &&
         a.rstrip == b.rstrip && a.normalized == b.normalized && a.special == b.special;
}

void load_added_tokens(const json& root, TokenizerData& data) {
  const json list = root.value("added_tokens", json::array());
  if (!list.is_array()) throw Error("\"added_tokens\" is not an array");
  std::map<int, AddedToken> by_id;  // HF's added_tokens_map_r
  int next_id = static_cast<int>(data.bpe.vocab_len());
  for (const json& t : list) {
    AddedToken tok;
    tok.content = t.at("content").get<std::string>();
    tok.single_word = t.value("single_word", false);
    tok.lstrip = t.value("lstrip", false);
    tok.rstrip = t.value("rstrip", false);
    tok.normalized = t.value("normalized", true);
    tok.special = t.value("special", false);
    if (tok.content.empty()) continue;
    auto known = data.added_ids.find(tok.content);
    if (known != data.added_ids.end()) {  // the same token twice is ignored
      auto prev = by_id.find(known->second);
      if (prev != by_id.end() && same_token(prev->second, tok)) continue;
    }
    int id;
    if (known != data.added_ids.end()) {
      id = known->second;
    } else if ((id = data.bpe.token_to_id(tok.content)) < 0) {
      id = next_id++;
    }
    tok.id = id;
    data.added_ids[tok.content] = id;
    by_id[id] = tok;
  }
  std::vector<AddedToken> tokens;
  std::vector<std::string> normalized;
  for (auto& kv : by_id) {
    normalized.push_back(data.nfc && kv.second.normalized ? data.normalize(kv.second.content) : kv.second.content);
    tokens.push_back(kv.second);
  }
  data.added.build(tokens, normalized);
}

void fill_token_bytes(TokenizerData& data) {
  int max_id = data.bpe.max_id();
  for (const AddedToken& t : data.added.tokens()) max_id = std::max(max_id, t.id);
  const size_t size = static_cast<size_t>(max_id + 1);
  data.token_bytes.assign(size, std::string());
  data.known.assign(size, false);
  for (int id = 0; id <= data.bpe.max_id(); ++id) {
    if (const std::string* tok = data.bpe.id_to_token(id)) {
      data.token_bytes[static_cast<size_t>(id)] = data.byte_level.decode_token(*tok);
      data.known[static_cast<size_t>(id)] = true;
    }
  }
  for (const AddedToken& t : data.added.tokens()) {  // added tokens decode from their (normalized) text
    const std::string text = data.nfc && t.normalized ? data.normalize(t.content) : t.content;
    data.token_bytes[static_cast<size_t>(t.id)] = data.byte_level.decode_token(text);
    data.known[static_cast<size_t>(t.id)] = true;
  }
}

}  // namespace

std::string TokenizerData::normalize(std::string_view valid) const {
  std::string out;
  if (nfc) {
    uni::nfc(valid, out);
  } else {
    out.assign(valid.data(), valid.size());
  }
  return out;
}

void load_tokenizer_json(const std::string& path, TokenizerData& data) {
  const std::string text = read_file(path);
  try {
    TokenizerJson parsed = parse_tokenizer_json(text);
    const json& root = parsed.rest;
    if (root.contains("version") && root["version"] != "1.0") throw Error("unknown tokenizer version");
    data.nfc = nfc_normalizer(root);
    check_pre_tokenizer(root);
    check_post_processor_and_decoder(root, data);
    if (!root.contains("model")) throw Error("\"model\" is missing");
    if (!parsed.has_vocab || !parsed.has_merges) throw Error("model.vocab or model.merges is missing");
    data.bpe.load(root["model"], parsed.vocab, parsed.merges, data.byte_level);
    decltype(parsed.vocab)().swap(parsed.vocab);  // free the copies before the token table is built
    decltype(parsed.merges)().swap(parsed.merges);
    load_added_tokens(root, data);
    fill_token_bytes(data);
  } catch (const json::exception& err) {
    throw Error(path + ": not a valid tokenizer.json: " + err.what());
  } catch (const Error& err) {
    throw Error(path + ": " + err.what());
  }
}

}  // namespace detail
}  // namespace gsurg

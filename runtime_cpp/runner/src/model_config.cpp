// Reads and checks model.json (see model_config.hpp).
#include "gsurg/model_config.hpp"

#include <algorithm>
#include <iterator>

#include "gsurg/config_read.hpp"
#include "gsurg/error.hpp"
#include "gsurg/family.hpp"
#include "gsurg/family_registry.hpp"
#include "gsurg/files.hpp"
#include "gsurg/json_access.hpp"

namespace gsurg {

namespace {

// What every model.json must declare first; the family and its version come from the registry
// (families.cpp). tests/test_model_json_schema.py holds the keys this file and the family's reader read,
// and these values, to the family's schema (schemas/model_json/<family>.v<version>.schema.json).
const char* const kFormat = "gsurg-model";

// The nets of the LLM half, which every family has; a family adds its own (Family::net_names).
const char* const kNetNames[] = {"embed", "decoder", "lm_head"};

// The family's nets first, then the core's; the core's required ones are checked before the family's.
void read_nets(ModelConfig& cfg, const JsonDoc& doc, const Family& family) {
  const nlohmann::json& nets = doc.at("nets");
  if (!nets.is_object()) doc.fail("nets", "must be an object");
  std::vector<std::string> names = family.net_names(doc);
  names.insert(names.end(), std::begin(kNetNames), std::end(kNetNames));
  for (const std::string& name : names) {
    std::string key = std::string("nets.") + name;
    if (!doc.has(key)) continue;  // which nets are needed is decided by the caller (net())
    NetFiles files;
    files.name = name;
    files.param = existing_file(cfg, doc, key + ".param");
    files.bin = existing_file(cfg, doc, key + ".bin");
    files.inputs = doc.strings(key + ".inputs");
    files.outputs = doc.strings(key + ".outputs");
    if (files.inputs.empty() || files.outputs.empty()) doc.fail(key, "needs at least one input and output");
    cfg.nets[name] = files;
  }
  std::vector<std::string> required = {"decoder", "lm_head"};
  for (const std::string& name : family.required_nets(doc)) required.push_back(name);
  for (const std::string& name : required) {
    if (cfg.nets.count(name) == 0) doc.fail(std::string("nets.") + name, "is missing");
  }
}

void read_decoder(ModelConfig& cfg, const JsonDoc& doc) {
  DecoderSettings& d = cfg.decoder;
  d.hidden = doc.str("decoder.hidden");
  d.mask = doc.str("decoder.mask");
  d.cos = doc.str("decoder.cos");
  d.sin = doc.str("decoder.sin");
  d.output = doc.str("decoder.output");
  d.cache_inputs = doc.strings("decoder.cache_inputs");
  d.cache_outputs = doc.strings("decoder.cache_outputs");
  if (d.cache_inputs.size() != d.cache_outputs.size() || d.cache_inputs.empty())
    doc.fail("decoder.cache_outputs", "must pair with decoder.cache_inputs (same non-zero count)");
  d.mask_value = static_cast<float>(doc.number("decoder.mask_value"));
  if (!(d.mask_value < 0.0f)) doc.fail("decoder.mask_value", "must be a large negative number");
  d.rope_theta = positive_number(doc, "decoder.rope.theta");
  d.rope_head_dim = positive_int(doc, "decoder.rope.head_dim");
  if (d.rope_head_dim % 2 != 0) doc.fail("decoder.rope.head_dim", "must be even");
  d.rope_full_width = table_width(doc, "decoder.rope.table_width");
  const NetFiles& dec = cfg.net("decoder");
  std::vector<std::string> ins = {d.hidden, d.mask, d.cos, d.sin};
  ins.insert(ins.end(), d.cache_inputs.begin(), d.cache_inputs.end());
  for (const auto& blob : ins) {
    if (std::find(dec.inputs.begin(), dec.inputs.end(), blob) == dec.inputs.end())
      doc.fail("decoder", "names blob \"" + blob + "\", not an input of nets.decoder");
  }
  std::vector<std::string> outs = d.cache_outputs;
  outs.push_back(d.output);
  for (const auto& blob : outs) {
    if (std::find(dec.outputs.begin(), dec.outputs.end(), blob) == dec.outputs.end())
      doc.fail("decoder", "names blob \"" + blob + "\", not an output of nets.decoder");
  }
}

// embedding_matrix.block_quant: the format of a block-quantized tied matrix, checked for consistency with
// its storage name and shape (the scale table's size is checked against the file by Embeddings).
void read_block_quant(EmbeddingMatrix& e, const JsonDoc& doc) {
  const int64_t bits = doc.integer("embedding_matrix.block_quant.bits");
  const int64_t block = doc.integer("embedding_matrix.block_quant.block_size");
  const int64_t row_bytes = doc.integer("embedding_matrix.block_quant.row_bytes");
  const int64_t scales = doc.integer("embedding_matrix.block_quant.scales_offset");
  if (bits != 4 && bits != 6 && bits != 8)
    doc.fail("embedding_matrix.block_quant.bits", "must be 4, 6 or 8");
  if (block != 32 && block != 64 && block != 128)
    doc.fail("embedding_matrix.block_quant.block_size", "must be 32, 64 or 128");
  if (e.storage != "int" + std::to_string(bits))
    doc.fail("embedding_matrix.storage", "is \"" + e.storage + "\" but block_quant.bits is " +
                                             std::to_string(bits));
  if (row_bytes != (e.cols * bits + 7) / 8)
    doc.fail("embedding_matrix.block_quant.row_bytes", "is " + std::to_string(row_bytes) + ", but " +
             std::to_string(e.cols) + " columns of " + std::to_string(bits) + " bits take " +
             std::to_string((e.cols * bits + 7) / 8) + " bytes");
  if (scales < 0) doc.fail("embedding_matrix.block_quant.scales_offset", "must not be negative");
  e.bits = static_cast<int>(bits);
  e.block_size = static_cast<int>(block);
  e.row_bytes = row_bytes;
  e.scales_offset = static_cast<uint64_t>(scales);
}

void read_embedding(ModelConfig& cfg, const JsonDoc& doc) {
  cfg.tied = doc.boolean("tie_word_embeddings");
  // Untied, or tied with no embedding_matrix entry (the family's model.json leaves the matrix to the embed
  // net): the rows come from the embed net.
  if (!cfg.tied || !doc.has("embedding_matrix")) {
    if (cfg.nets.count("embed") == 0)
      doc.fail("nets.embed", std::string("is missing (") + (cfg.tied ? "tied embeddings without "
               "embedding_matrix" : "untied embeddings") + " need the embed net)");
    return;
  }
  EmbeddingMatrix& e = cfg.embedding;
  e.bin = existing_file(cfg, doc, "embedding_matrix.bin");
  int64_t off = doc.integer("embedding_matrix.offset");
  int64_t tag_off = doc.integer("embedding_matrix.tag_offset");
  e.storage = doc.str("embedding_matrix.storage");
  const bool quantized = doc.has("embedding_matrix.block_quant");
  const bool untagged = e.storage == "raw" || e.storage == "bytes" || quantized;
  int64_t tag = untagged ? 0 : doc.integer("embedding_matrix.tag");
  if (off < 0) doc.fail("embedding_matrix.offset", "must not be negative");
  if (tag_off < 0) doc.fail("embedding_matrix.tag_offset", "must not be negative");
  if (tag < 0 || tag > 0xFFFFFFFFLL) doc.fail("embedding_matrix.tag", "must be a 32-bit tag");
  e.offset = static_cast<uint64_t>(off);
  e.tag_offset = static_cast<uint64_t>(tag_off);
  e.tag = static_cast<uint32_t>(tag);
  std::vector<int64_t> shape = doc.integers("embedding_matrix.shape");
  if (shape.size() != 2 || shape[0] < 1 || shape[1] < 1)
    doc.fail("embedding_matrix.shape", "must be [rows, columns] with positive sizes");
  e.rows = shape[0];
  e.cols = shape[1];
  if (e.cols != cfg.hidden_size)
    doc.fail("embedding_matrix.shape", "has " + std::to_string(e.cols) + " columns but hidden_size is " +
                                           std::to_string(cfg.hidden_size));
  if (e.rows < cfg.vocab_size)
    doc.fail("embedding_matrix.shape", "has " + std::to_string(e.rows) + " rows but vocab_size is " +
                                           std::to_string(cfg.vocab_size));
  if (quantized) read_block_quant(e, doc);
}

// "family": "a", "b" or "c" (the registered families), for messages.
std::string family_list() {
  std::string out;
  const std::vector<FamilyEntry>& all = families();
  for (size_t i = 0; i < all.size(); ++i) {
    out += (i == 0 ? "\"" : i + 1 == all.size() ? " or \"" : ", \"") + std::string(all[i].name) + "\"";
  }
  return out;
}

// format, family and version first: a model.json of another family or version is refused as such, not by
// the first key its layout lacks.
const FamilyEntry& read_header(const JsonDoc& doc) {
  const std::string format = doc.str("format");
  for (const FamilyEntry& f : families()) {
    if (format == f.legacy_format && !format.empty())
      doc.fail("format", "is \"" + format + "\": a model.json of version 1, written before families; "
               "convert the model again with gsurg apply");
  }
  if (format != kFormat) doc.fail("format", "is \"" + format + "\", not \"" + kFormat + "\"");
  const std::string family = doc.str("family");
  const FamilyEntry* entry = find_family(family);
  if (entry == nullptr)
    doc.fail("family", "is \"" + family + "\", not " + family_list() + " (" + program_name() + " runs " +
                           (families().size() == 1 ? "that family only)" : "those families only)"));
  const int64_t version = doc.integer("version");
  if (version != entry->version)
    doc.fail("version", "is " + std::to_string(version) + ", not " + std::to_string(entry->version) +
                            " (this runtime reads " + entry->name + " version " +
                            std::to_string(entry->version) + ")");
  return *entry;
}

int64_t tokenizer_max_length(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& err) {
    throw Error(path + ": not valid JSON: " + err.what());
  }
  auto it = j.find("model_max_length");
  if (it == j.end() || !it->is_number_integer()) return 0;  // HF writes a 1e30 float when unset
  int64_t v = it->get<int64_t>();
  return v > 0 && v < (1LL << 40) ? v : 0;
}

}  // namespace

int positive_int(const JsonDoc& doc, const std::string& key, int64_t limit) {
  int64_t v = doc.integer(key);
  if (v < 1 || v >= limit) doc.fail(key, "must be a positive integer, not " + std::to_string(v));
  return static_cast<int>(v);
}

double positive_number(const JsonDoc& doc, const std::string& key) {
  double v = doc.number(key);
  if (!(v > 0.0)) doc.fail(key, "must be a positive number");
  return v;
}

std::string existing_file(const ModelConfig& cfg, const JsonDoc& doc, const std::string& key) {
  std::string rel = doc.str(key);
  if (rel.empty()) doc.fail(key, "is an empty file name");
  std::string path = join_path(cfg.folder, rel);
  const std::string problem = file_problem(path);
  if (!problem.empty()) throw Error(path + ": " + problem + " (named by " + doc.file() + " \"" + key + "\")");
  return path;
}

bool table_width(const JsonDoc& doc, const std::string& key) {
  std::string w = doc.str(key);
  if (w != "full" && w != "half") doc.fail(key, "must be \"full\" or \"half\", not \"" + w + "\"");
  return w == "full";
}

const NetFiles& ModelConfig::net(const std::string& name) const {
  auto it = nets.find(name);
  if (it == nets.end()) throw Error(json_path + ": entry \"nets." + name + "\" is missing");
  return it->second;
}

bool ModelConfig::is_eos(int id) const {
  return std::find(eos_tokens.begin(), eos_tokens.end(), id) != eos_tokens.end();
}

ModelConfig ModelConfig::load(const std::string& folder, std::unique_ptr<Family>& family) {
  ModelConfig cfg;
  cfg.folder = folder;
  cfg.json_path = join_path(folder, "model.json");
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(read_file(cfg.json_path));
  } catch (const nlohmann::json::exception& err) {
    throw Error(cfg.json_path + ": not valid JSON: " + err.what());
  }
  if (!root.is_object()) throw Error(cfg.json_path + ": not a JSON object");
  JsonDoc doc(root, cfg.json_path);
  const FamilyEntry& entry = read_header(doc);
  cfg.family = entry.name;
  family = entry.make();
  cfg.hidden_size = positive_int(doc, "hidden_size");
  cfg.num_layers = positive_int(doc, "num_layers");
  cfg.vocab_size = positive_int(doc, "vocab_size");
  read_nets(cfg, doc, *family);
  read_decoder(cfg, doc);
  if (cfg.decoder.cache_inputs.size() != 2 * static_cast<size_t>(cfg.num_layers))
    doc.fail("decoder.cache_inputs", "must hold a k and a v cache per layer (num_layers " +
                                         std::to_string(cfg.num_layers) + ")");
  for (int64_t e : doc.integers("tokens.eos")) {
    if (e < 0 || e >= cfg.vocab_size) doc.fail("tokens.eos", "holds " + std::to_string(e)
        + ", not an id below vocab_size");
    cfg.eos_tokens.push_back(static_cast<int>(e));
  }
  // An empty list is a checkpoint that names no EOS (gsurg writes [] then): generation stops at --gen or
  // the context limit only.
  // A checkpoint without tokenizer files converts to a model.json without "tokenizer": it runs on token
  // ids only (--ids, a batch request's "ids").
  if (doc.has("tokenizer")) {
    cfg.tokenizer_json = existing_file(cfg, doc, "tokenizer.json");
    cfg.tokenizer_config = existing_file(cfg, doc, "tokenizer.config");
  }
  read_embedding(cfg, doc);
  if (doc.has("max_positions")) {
    cfg.max_positions = doc.integer("max_positions");
    if (cfg.max_positions < 1) doc.fail("max_positions", "must be a positive integer");
  } else if (!cfg.tokenizer_config.empty()) {
    cfg.max_positions = tokenizer_max_length(cfg.tokenizer_config);
  }
  family->read_config(doc, cfg);  // last: the family may check its keys against any of the core's
  return cfg;
}

}  // namespace gsurg

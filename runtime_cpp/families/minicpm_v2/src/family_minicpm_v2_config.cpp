// MiniCPM-V-2's model.json keys and its registry entry (see family_minicpm_v2.hpp). The core reads the rest
// (model_config.cpp); tests/test_model_json_schema.py holds the keys both files read to
// graphsurgeon/models/minicpm_v2/minicpm_v2.v1.schema.json, and kFamily / kVersion to its constants. Every
// value this runtime does not implement is refused naming its key, so a conversion made with other settings
// cannot run with these.
#include <cmath>
#include <iterator>
#include <string>

#include "gsurg/config_read.hpp"
#include "gsurg/error.hpp"
#include "gsurg/family_minicpm_v2.hpp"
#include "gsurg/json_access.hpp"

namespace gsurg {

namespace {

const char* const kFamily = "minicpm_v2";
const int64_t kVersion = 1;

// The family's nets, read by the core beside its own (embed, decoder, lm_head).
const char* const kNetNames[] = {"vision", "pos_embed", "resampler"};

// The sizes the image processor takes (gsurg/minicpm_v2_image_processor.hpp, SliceConfig::from_json).
const int kMaxScaleResolution = 4096;
const int kMaxSliceNums = 64;

std::unique_ptr<Family> make_minicpm_v2() { return std::unique_ptr<Family>(new MiniCpmV2Family()); }

// A string entry that must have the one value this runtime implements.
void require(const JsonDoc& doc, const char* key, const std::string& got, const char* want) {
  if (got != want) doc.fail(key, "must be \"" + std::string(want) + "\", not \"" + got + "\"");
}

void require_blob(const JsonDoc& doc, const char* key, const std::string& blob, const NetFiles& net, bool input) {
  const std::vector<std::string>& blobs = input ? net.inputs : net.outputs;
  for (const std::string& b : blobs) {
    if (b == blob) return;
  }
  doc.fail(key, "names blob \"" + blob + "\", not an " + (input ? "input" : "output") + " of nets." + net.name);
}

const NetFiles& named_net(const JsonDoc& doc, const ModelConfig& cfg, const char* key, const std::string& net) {
  if (cfg.nets.count(net) == 0) doc.fail(key, "names \"" + net + "\", not a net of model.json");
  return cfg.net(net);
}

int token(const JsonDoc& doc, const ModelConfig& cfg, const char* key, int64_t id) {
  if (id < 0 || id >= cfg.vocab_size) doc.fail(key, "is " + std::to_string(id) + ", not an id below vocab_size");
  return static_cast<int>(id);
}

void read_vision(MiniCpmV2Vision& v, const JsonDoc& doc, const ModelConfig& cfg) {
  v.patch_size = positive_int(doc, "vision.patch_size");
  v.patch_dim = positive_int(doc, "vision.patch_dim");
  if (static_cast<int64_t>(v.patch_dim) != 3LL * v.patch_size * v.patch_size)
    doc.fail("vision.patch_dim", "is " + std::to_string(v.patch_dim) + ", not 3 * patch_size^2 = " +
                                     std::to_string(3LL * v.patch_size * v.patch_size));
  require(doc, "vision.patch_order", doc.str("vision.patch_order"), "row-major, columns (channel, ky, kx)");
  v.hidden = positive_int(doc, "vision.hidden");
  v.layers = positive_int(doc, "vision.layers");
  v.heads = positive_int(doc, "vision.heads");
  if (v.hidden % v.heads != 0) doc.fail("vision.heads", "does not divide vision.hidden");

  v.net = doc.str("vision.encoder.net");
  const NetFiles& enc = named_net(doc, cfg, "vision.encoder.net", v.net);
  v.rows = doc.str("vision.encoder.rows");
  v.pos = doc.str("vision.encoder.pos");
  v.output = doc.str("vision.encoder.output");
  require_blob(doc, "vision.encoder.rows", v.rows, enc, true);
  require_blob(doc, "vision.encoder.pos", v.pos, enc, true);
  require_blob(doc, "vision.encoder.output", v.output, enc, false);

  v.table_net = doc.str("vision.position_embedding.net");
  const NetFiles& table = named_net(doc, cfg, "vision.position_embedding.net", v.table_net);
  v.table_input = doc.str("vision.position_embedding.input");
  v.table_output = doc.str("vision.position_embedding.output");
  require_blob(doc, "vision.position_embedding.input", v.table_input, table, true);
  require_blob(doc, "vision.position_embedding.output", v.table_output, table, false);
  v.grid_side = positive_int(doc, "vision.position_embedding.grid_side", 1 << 15);
  const std::vector<int64_t> shape = doc.integers("vision.position_embedding.shape");
  const int64_t rows = static_cast<int64_t>(v.grid_side) * v.grid_side;
  if (shape.size() != 2 || shape[0] != rows || shape[1] != v.hidden)
    doc.fail("vision.position_embedding.shape", "must be [grid_side^2, vision.hidden] = [" + std::to_string(rows) +
                                                     ", " + std::to_string(v.hidden) + "]");
  v.table_rows = static_cast<int>(rows);
  require(doc, "vision.position_embedding.interpolation", doc.str("vision.position_embedding.interpolation"),
          "bicubic");
  if (!doc.boolean("vision.position_embedding.antialias"))
    doc.fail("vision.position_embedding.antialias",
             "is false; this runtime resamples the table as timm does, antialiased (torch's antialias=True)");
  if (doc.boolean("vision.position_embedding.align_corners"))
    doc.fail("vision.position_embedding.align_corners", "must be false (torch's bicubic without aligned corners)");
  if (!doc.boolean("vision.position_embedding.unchanged_at_grid_side"))
    doc.fail("vision.position_embedding.unchanged_at_grid_side",
             "must be true (the table is used as it is at its own grid)");
}

void read_resampler(MiniCpmV2Resampler& r, const JsonDoc& doc, const ModelConfig& cfg) {
  r.net = doc.str("resampler.net");
  const NetFiles& net = named_net(doc, cfg, "resampler.net", r.net);
  r.features = doc.str("resampler.features");
  r.key_pos = doc.str("resampler.key_pos");
  r.query_ids = doc.str("resampler.query_ids");
  r.output = doc.str("resampler.output");
  require_blob(doc, "resampler.features", r.features, net, true);
  require_blob(doc, "resampler.key_pos", r.key_pos, net, true);
  require_blob(doc, "resampler.query_ids", r.query_ids, net, true);
  require_blob(doc, "resampler.output", r.output, net, false);
  r.query_num = positive_int(doc, "resampler.query_num", 1 << 16);
  r.hidden = positive_int(doc, "resampler.hidden");
  if (r.hidden != cfg.hidden_size)
    doc.fail("resampler.hidden", "is " + std::to_string(r.hidden) + ", but hidden_size is " +
                                     std::to_string(cfg.hidden_size) + " (the resampler's rows are LLM rows)");
  r.heads = positive_int(doc, "resampler.heads");
  require(doc, "resampler.key_pos_embedding.kind", doc.str("resampler.key_pos_embedding.kind"), "sincos-2d");
  r.key_dim = positive_int(doc, "resampler.key_pos_embedding.dim");
  if (r.key_dim % 4 != 0) doc.fail("resampler.key_pos_embedding.dim", "must be a multiple of 4");
  if (r.key_dim != r.hidden)
    doc.fail("resampler.key_pos_embedding.dim", "is " + std::to_string(r.key_dim) + ", not resampler.hidden " +
                                                    std::to_string(r.hidden));
  require(doc, "resampler.key_pos_embedding.layout", doc.str("resampler.key_pos_embedding.layout"),
          "column-sin, column-cos, row-sin, row-cos");
  if (doc.number("resampler.key_pos_embedding.base") != 10000.0)
    doc.fail("resampler.key_pos_embedding.base", "must be 10000 (the official get_2d_sincos_pos_embed)");
  require(doc, "resampler.key_pos_embedding.arithmetic", doc.str("resampler.key_pos_embedding.arithmetic"),
          "float32");
}

// [0.5, 0.5, 0.5]: the normalisation the processor implements ((x / 255 - 0.5) / 0.5).
void require_halves(const JsonDoc& doc, const char* key, const nlohmann::json& v) {
  bool halves = v.is_array() && v.size() == 3;
  for (size_t i = 0; halves && i < 3; ++i) halves = v[i].is_number() && v[i].get<double>() == 0.5;
  if (!halves)
    doc.fail(key, "must be [0.5, 0.5, 0.5] (the normalisation this runtime implements), not " + v.dump());
}

// image_processor: the slicing settings the processor reads (checked here, with the file's name), and the
// normalisation it implements.
void read_image_processor(MiniCpmV2Settings& s, const JsonDoc& doc) {
  if (!doc.boolean("image_processor.slice_mode"))
    doc.fail("image_processor.slice_mode", "must be true (MiniCPM-V-2 slices large images)");
  positive_int(doc, "image_processor.max_slice_nums", kMaxSliceNums + 1);
  positive_int(doc, "image_processor.scale_resolution", kMaxScaleResolution + 1);
  const int patch = positive_int(doc, "image_processor.patch_size");
  if (patch != s.vision.patch_size)
    doc.fail("image_processor.patch_size", "is " + std::to_string(patch) + ", but vision.patch_size is " +
                                               std::to_string(s.vision.patch_size));
  require(doc, "image_processor.resample", doc.str("image_processor.resample"), "bicubic");
  require(doc, "image_processor.resize_pass_order", doc.str("image_processor.resize_pass_order"),
          "horizontal-first");
  const std::string order = doc.str("image_processor.slice_order");
  if (order != "row-major" && order != "column-major")
    doc.fail("image_processor.slice_order", "must be \"row-major\" or \"column-major\", not \"" + order + "\"");
  s.column_major = order == "column-major";
  require_halves(doc, "image_processor.image_mean", doc.at("image_processor.image_mean"));
  require_halves(doc, "image_processor.image_std", doc.at("image_processor.image_std"));
  if (std::fabs(doc.number("image_processor.rescale_factor") * 255.0 - 1.0) > 1e-12)
    doc.fail("image_processor.rescale_factor", "must be 1/255");
  if (!doc.boolean("image_processor.do_convert_rgb"))
    doc.fail("image_processor.do_convert_rgb", "must be true (images are converted to RGB)");
  s.image_processor = doc.at("image_processor");
}

void read_prompt(MiniCpmV2Prompt& p, const JsonDoc& doc, const ModelConfig& cfg) {
  p.user = doc.str("prompt.user");
  p.assistant = doc.str("prompt.assistant");
  p.image_start = doc.str("prompt.image_start");
  p.image_end = doc.str("prompt.image_end");
  p.slice_start = doc.str("prompt.slice_start");
  p.slice_end = doc.str("prompt.slice_end");
  p.placeholder = doc.str("prompt.placeholder");
  if (p.user.empty() || p.assistant.empty()) doc.fail("prompt", "has an empty chat marker");
  if (p.image_start.empty() || p.image_end.empty() || p.slice_start.empty() || p.slice_end.empty() ||
      p.placeholder.empty())
    doc.fail("prompt", "has an empty image marker");
  p.image_start_id = token(doc, cfg, "tokens.image_start", doc.integer("tokens.image_start"));
  p.image_end_id = token(doc, cfg, "tokens.image_end", doc.integer("tokens.image_end"));
  p.slice_start_id = token(doc, cfg, "tokens.slice_start", doc.integer("tokens.slice_start"));
  p.slice_end_id = token(doc, cfg, "tokens.slice_end", doc.integer("tokens.slice_end"));
  p.placeholder_id = token(doc, cfg, "tokens.placeholder", doc.integer("tokens.placeholder"));
  p.bos_id = token(doc, cfg, "tokens.bos", doc.integer("tokens.bos"));
  if (p.image_start_id == p.image_end_id) doc.fail("tokens.image_end", "is the id of tokens.image_start");
}

}  // namespace

FamilyEntry minicpm_v2_entry() { return FamilyEntry{kFamily, kVersion, "", make_minicpm_v2}; }

std::string MiniCpmV2Family::name() const { return kFamily; }

std::vector<std::string> MiniCpmV2Family::net_names(const JsonDoc&) const {
  return std::vector<std::string>(std::begin(kNetNames), std::end(kNetNames));
}

std::vector<std::string> MiniCpmV2Family::required_nets(const JsonDoc& doc) const { return net_names(doc); }

void MiniCpmV2Family::read_config(const JsonDoc& doc, const ModelConfig& cfg) {
  read_minicpm_v2_settings(settings_, doc, cfg);
}

void read_minicpm_v2_settings(MiniCpmV2Settings& s, const JsonDoc& doc, const ModelConfig& cfg) {
  read_vision(s.vision, doc, cfg);
  read_resampler(s.resampler, doc, cfg);
  read_image_processor(s, doc);
  read_prompt(s.prompt, doc, cfg);
  s.tokenizer_json = cfg.tokenizer_json;
  require(doc, "decoder.rope.layout", doc.str("decoder.rope.layout"), "rotate-half");
  if (cfg.nets.count("embed") == 0 || cfg.tied)
    doc.fail("tie_word_embeddings", "must be false: MiniCPM-V-2's embed net applies muP's scale_emb");
}

}  // namespace gsurg

// Qwen3-VL's model.json keys and its registry entry (see family_qwen3_vl.hpp). The core reads the rest
// (model_config.cpp); tests/test_model_json_schema.py holds the keys both files read to
// schemas/model_json/qwen3_vl.v1.schema.json, and kFamily / kVersion to its constants.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <utility>

#include "gsurg/config_read.hpp"
#include "gsurg/error.hpp"
#include "gsurg/family_qwen3_vl.hpp"
#include "gsurg/json_access.hpp"

namespace gsurg {

namespace {

const char* const kFamily = "qwen3_vl";
const int64_t kVersion = 1;

// The family's fixed nets, read by the core beside its own; the DeepStack mergers are the ones
// vision.deepstack names.
const char* const kNetNames[] = {"patch_embed", "pos_embed", "vision", "merger"};

std::unique_ptr<Family> make_qwen3_vl() { return std::unique_ptr<Family>(new Qwen3VlFamily()); }

// vision.deepstack[k].<field>: a string or integer of one tap entry.
const nlohmann::json& tap_field(const JsonDoc& doc, const nlohmann::json& entry, size_t k,
                                const char* field) {
  const std::string key = "vision.deepstack[" + std::to_string(k) + "]." + field;
  if (!entry.is_object()) doc.fail("vision.deepstack[" + std::to_string(k) + "]", "must be an object");
  auto it = entry.find(field);
  if (it == entry.end()) doc.fail(key, "is missing");
  return *it;
}

std::string tap_string(const JsonDoc& doc, const nlohmann::json& entry, size_t k, const char* field) {
  const nlohmann::json& v = tap_field(doc, entry, k, field);
  if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>().find('\0') != std::string::npos)
    doc.fail("vision.deepstack[" + std::to_string(k) + "]." + field,
             "must be a non-empty string, not " + v.dump());
  return v.get<std::string>();
}

int tap_index(const JsonDoc& doc, const nlohmann::json& entry, size_t k, const char* field, int limit) {
  const nlohmann::json& v = tap_field(doc, entry, k, field);
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= limit)
    doc.fail("vision.deepstack[" + std::to_string(k) + "]." + field,
             "must be an integer from 0 to " + std::to_string(limit - 1) + ", not " + v.dump());
  return static_cast<int>(v.get<int64_t>());
}

// The merger net of every tap entry (before the rest is read: the core reads these nets' files).
std::vector<std::string> deepstack_nets(const JsonDoc& doc) {
  std::vector<std::string> out;
  if (!doc.has("vision.deepstack")) return out;  // read_config names the missing key
  const nlohmann::json& taps = doc.at("vision.deepstack");
  if (!taps.is_array()) doc.fail("vision.deepstack", "must be a list, not " + taps.dump());
  for (size_t k = 0; k < taps.size(); ++k) out.push_back(tap_string(doc, taps[k], k, "merger"));
  return out;
}

void require_blob(const JsonDoc& doc, const std::string& key, const std::string& blob, const NetFiles& net,
                  bool input) {
  const std::vector<std::string>& blobs = input ? net.inputs : net.outputs;
  if (std::find(blobs.begin(), blobs.end(), blob) == blobs.end())
    doc.fail(key, "names blob \"" + blob + "\", not an " + (input ? "input" : "output") + " of nets." +
                      net.name);
}

// A net named by model.json, with its two interface blobs (key: the entry naming them, for errors).
Qwen3VlNetIo net_io(const JsonDoc& doc, const ModelConfig& cfg, const std::string& key, std::string net,
                    std::string input, std::string output) {
  if (cfg.nets.count(net) == 0) doc.fail(key + ".net", "names \"" + net + "\", not a net of model.json");
  require_blob(doc, key + ".input", input, cfg.net(net), true);
  require_blob(doc, key + ".output", output, cfg.net(net), false);
  return Qwen3VlNetIo{std::move(net), std::move(input), std::move(output)};
}

int token(const JsonDoc& doc, const ModelConfig& cfg, const std::string& key, int64_t id) {
  if (id < 0 || id >= cfg.vocab_size) doc.fail(key, "is not an id below vocab_size");
  return static_cast<int>(id);
}

void read_vision(Qwen3VlVisionSettings& v, const JsonDoc& doc, const ModelConfig& cfg) {
  v.patch_size = positive_int(doc, "vision.patch_size");
  v.temporal_patch_size = positive_int(doc, "vision.temporal_patch_size");
  v.in_channels = positive_int(doc, "vision.in_channels");
  if (v.in_channels != 3) doc.fail("vision.in_channels", "must be 3 (RGB images)");
  v.merge_size = positive_int(doc, "vision.merge_size");
  v.patch_dim = positive_int(doc, "vision.patch_dim");
  if (static_cast<int64_t>(v.patch_dim) !=
      static_cast<int64_t>(v.in_channels) * v.temporal_patch_size * v.patch_size * v.patch_size)
    doc.fail("vision.patch_dim",
             "is " + std::to_string(v.patch_dim) + ", not in_channels * temporal_patch_size * patch_size^2 = " +
                 std::to_string(v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size));
  v.hidden = positive_int(doc, "vision.hidden");
  v.heads = positive_int(doc, "vision.heads");
  v.head_dim = positive_int(doc, "vision.head_dim");
  v.depth = positive_int(doc, "vision.depth");
  v.merged_width = positive_int(doc, "vision.merged_width");
  if (static_cast<int64_t>(v.merged_width) != static_cast<int64_t>(v.hidden) * v.merge_size * v.merge_size)
    doc.fail("vision.merged_width", "is " + std::to_string(v.merged_width) +
             ", not hidden * merge_size^2 = " +
             std::to_string(static_cast<int64_t>(v.hidden) * v.merge_size * v.merge_size));
  v.out_hidden = positive_int(doc, "vision.out_hidden");
  if (v.out_hidden != cfg.hidden_size)
    doc.fail("vision.out_hidden", "is " + std::to_string(v.out_hidden) + ", but hidden_size is " +
             std::to_string(cfg.hidden_size));
  const std::string order = doc.str("vision.patch_order");
  if (order != "merge-block")
    doc.fail("vision.patch_order", "must be \"merge-block\", not \"" + order + "\"");
  v.patch_embed = net_io(doc, cfg, "vision.patch_embed", doc.str("vision.patch_embed.net"),
                         doc.str("vision.patch_embed.input"), doc.str("vision.patch_embed.output"));
  v.merger = net_io(doc, cfg, "vision.merger", doc.str("vision.merger.net"), doc.str("vision.merger.input"),
                    doc.str("vision.merger.output"));

  v.encoder_net = doc.str("vision.encoder.net");
  if (cfg.nets.count(v.encoder_net) == 0)
    doc.fail("vision.encoder.net", "names \"" + v.encoder_net + "\", not a net of model.json");
  const NetFiles& enc = cfg.net(v.encoder_net);
  v.enc_hidden = doc.str("vision.encoder.hidden");
  v.enc_pos = doc.str("vision.encoder.pos");
  v.enc_cos = doc.str("vision.encoder.cos");
  v.enc_sin = doc.str("vision.encoder.sin");
  v.enc_output = doc.str("vision.encoder.output");
  for (const std::string* blob : {&v.enc_hidden, &v.enc_pos, &v.enc_cos, &v.enc_sin})
    require_blob(doc, "vision.encoder", *blob, enc, true);
  require_blob(doc, "vision.encoder.output", v.enc_output, enc, false);

  v.rope_theta = positive_number(doc, "vision.rope.theta");
  v.rope_head_dim = positive_int(doc, "vision.rope.head_dim");
  if (v.rope_head_dim % 4 != 0)
    doc.fail("vision.rope.head_dim", "must be a multiple of 4 (a quarter per axis)");
  const std::string layout = doc.str("vision.rope.layout");
  if (layout != "row-col-quarters")
    doc.fail("vision.rope.layout", "must be \"row-col-quarters\", not \"" + layout + "\"");
  if (!table_width(doc, "vision.rope.table_width"))
    doc.fail("vision.rope.table_width", "must be \"full\"");

  const std::string pe = "vision.position_embedding";
  v.pos_embed =
      net_io(doc, cfg, pe, doc.str("vision.position_embedding.net"), doc.str("vision.position_embedding.input"),
             doc.str("vision.position_embedding.output"));
  const std::vector<int64_t> shape = doc.integers("vision.position_embedding.shape");
  v.grid_side = positive_int(doc, "vision.position_embedding.grid_side");
  const int64_t rows = static_cast<int64_t>(v.grid_side) * v.grid_side;
  if (shape.size() != 2 || shape[0] != rows || shape[1] != v.hidden)
    doc.fail(pe + ".shape", "must be [grid_side^2, vision.hidden] = [" + std::to_string(rows) + ", " +
             std::to_string(v.hidden) + "]");
  const std::string interp = doc.str("vision.position_embedding.interpolation");
  if (interp != "bilinear") doc.fail(pe + ".interpolation", "must be \"bilinear\", not \"" + interp + "\"");
  v.align_corners = doc.boolean("vision.position_embedding.align_corners");

  const nlohmann::json& taps = doc.at("vision.deepstack");
  if (!taps.is_array() || taps.empty()) doc.fail("vision.deepstack", "must be a non-empty list of taps");
  for (size_t k = 0; k < taps.size(); ++k) {
    Qwen3VlTap t;
    t.block = tap_index(doc, taps[k], k, "block", v.depth);
    t.tap = tap_string(doc, taps[k], k, "tap");
    t.merger = tap_string(doc, taps[k], k, "merger");
    t.decoder_input = tap_string(doc, taps[k], k, "decoder_input");
    const int after = tap_index(doc, taps[k], k, "after_layer", cfg.num_layers);
    if (after != static_cast<int>(k))
      doc.fail("vision.deepstack[" + std::to_string(k) + "].after_layer",
               "is " + std::to_string(after) + "; DeepStack feature k is added after LLM layer k");
    require_blob(doc, "vision.deepstack[" + std::to_string(k) + "].tap", t.tap, enc, false);
    v.taps.push_back(t);
  }
}

}  // namespace

FamilyEntry qwen3_vl_entry() { return FamilyEntry{kFamily, kVersion, "", make_qwen3_vl}; }

std::string Qwen3VlFamily::name() const { return kFamily; }

std::vector<std::string> Qwen3VlFamily::net_names(const JsonDoc& doc) const {
  std::vector<std::string> names(std::begin(kNetNames), std::end(kNetNames));
  for (const std::string& net : deepstack_nets(doc)) names.push_back(net);
  return names;
}

std::vector<std::string> Qwen3VlFamily::required_nets(const JsonDoc& doc) const { return net_names(doc); }

void Qwen3VlFamily::read_config(const JsonDoc& doc, const ModelConfig& cfg) {
  read_qwen3_vl_settings(settings_, doc, cfg);
}

std::vector<std::string> Qwen3VlFamily::decoder_inputs() const {
  std::vector<std::string> out;
  for (const Qwen3VlTap& t : settings_.vision.taps) out.push_back(t.decoder_input);
  return out;
}

void read_qwen3_vl_settings(Qwen3VlSettings& s, const JsonDoc& doc, const ModelConfig& cfg) {
  read_vision(s.vision, doc, cfg);
  const std::vector<std::string> inputs = doc.strings("decoder.deepstack");
  if (inputs.size() != s.vision.taps.size())
    doc.fail("decoder.deepstack", "names " + std::to_string(inputs.size()) +
             " inputs, but vision.deepstack has " +
             std::to_string(s.vision.taps.size()) + " taps");
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k] != s.vision.taps[k].decoder_input)
      doc.fail("decoder.deepstack", "input " + std::to_string(k) + " is \"" + inputs[k] +
               "\", but vision.deepstack[" + std::to_string(k) + "].decoder_input is \"" +
               s.vision.taps[k].decoder_input + "\"");
    require_blob(doc, "decoder.deepstack", inputs[k], cfg.net("decoder"), true);
  }
  const std::vector<int64_t> sec = doc.integers("decoder.rope.mrope_section");
  if (sec.size() != 3 || sec[0] < 1 || sec[1] < 1 || sec[2] < 1)
    doc.fail("decoder.rope.mrope_section", "must be three integers >= 1 [t, h, w]");
  if (sec[0] + sec[1] + sec[2] != cfg.decoder.rope_head_dim / 2)
    doc.fail("decoder.rope.mrope_section", "sums to " + std::to_string(sec[0] + sec[1] + sec[2]) +
             ", not decoder.rope.head_dim/2 = " + std::to_string(cfg.decoder.rope_head_dim / 2));
  s.mrope_t = static_cast<int>(sec[0]);
  s.mrope_h = static_cast<int>(sec[1]);
  s.mrope_w = static_cast<int>(sec[2]);
  const std::string layout = doc.str("decoder.rope.layout");
  if (layout != "interleaved" && layout != "block")
    doc.fail("decoder.rope.layout", "must be \"interleaved\" or \"block\", not \"" + layout + "\"");
  s.mrope_block = layout == "block";
  if (!cfg.decoder.rope_full_width) doc.fail("decoder.rope.table_width", "must be \"full\"");

  s.image_processor = doc.at("image_processor");
  if (!s.image_processor.is_object()) doc.fail("image_processor", "must be an object");
  const int vision_sizes[] = {s.vision.patch_size, s.vision.merge_size, s.vision.temporal_patch_size};
  const char* const processor_keys[] = {"image_processor.patch_size", "image_processor.merge_size",
                                        "image_processor.temporal_patch_size"};
  for (size_t i = 0; i < 3; ++i) {
    const nlohmann::json& j = s.image_processor;
    const char* key = processor_keys[i] + std::strlen("image_processor.");
    if (j.contains(key) && j[key].is_number_integer() && j[key].get<int64_t>() != vision_sizes[i])
      throw Error(doc.file() + ": entry \"" + processor_keys[i] + "\" is " + j[key].dump() +
                  ", but the vision nets were converted with " + std::to_string(vision_sizes[i]));
  }
  s.image_pad = token(doc, cfg, "tokens.image_pad", doc.integer("tokens.image_pad"));
  s.video_pad = token(doc, cfg, "tokens.video_pad", doc.integer("tokens.video_pad"));
  s.vision_start = token(doc, cfg, "tokens.vision_start", doc.integer("tokens.vision_start"));
  s.vision_end = token(doc, cfg, "tokens.vision_end", doc.integer("tokens.vision_end"));
}

}  // namespace gsurg

// Penguin-VL's model.json keys and its registry entry (see family_penguin_vl.hpp). The core reads the rest
// (model_config.cpp); tests/test_model_json_schema.py holds the keys both files read to
// schemas/model_json/penguin_vl.v2.schema.json, and kFamily / kVersion to its constants.
#include <algorithm>
#include <iterator>

#include "gsurg/config_read.hpp"
#include "gsurg/family_penguin_vl.hpp"
#include "gsurg/json_access.hpp"

namespace gsurg {

namespace {

const char* const kFamily = "penguin_vl";
const int64_t kVersion = 2;
// format of the model.json files written before they had a family (version 1)
const char* const kUnversionedFormat = "gsurg-penguin-vl";

// The family's nets, read by the core beside its own (embed, decoder, lm_head).
const char* const kNetNames[] = {"vision_embed_patch", "vision_encoder", "vision_projector"};

std::unique_ptr<Family> make_penguin_vl() { return std::unique_ptr<Family>(new PenguinVlFamily()); }

}  // namespace

FamilyEntry penguin_vl_entry() { return FamilyEntry{kFamily, kVersion, kUnversionedFormat, make_penguin_vl}; }

std::string PenguinVlFamily::name() const { return kFamily; }

std::vector<std::string> PenguinVlFamily::net_names(const JsonDoc& doc) const {
  (void)doc;
  return std::vector<std::string>(std::begin(kNetNames), std::end(kNetNames));
}

std::vector<std::string> PenguinVlFamily::required_nets(const JsonDoc& doc) const { return net_names(doc); }

void PenguinVlFamily::read_config(const JsonDoc& doc, const ModelConfig& cfg) {
  read_penguin_settings(settings_, doc, cfg);
}

void read_penguin_settings(PenguinSettings& s, const JsonDoc& doc, const ModelConfig& cfg) {
  PenguinVisionSettings& v = s.vision;
  v.hidden = doc.str("vision.hidden");
  v.cos = doc.str("vision.cos");
  v.sin = doc.str("vision.sin");
  v.output = doc.str("vision.output");
  v.layers = positive_int(doc, "vision.layers");
  v.rope_theta = positive_number(doc, "vision.rope.theta");
  v.rope_head_dim = positive_int(doc, "vision.rope.head_dim");
  if (v.rope_head_dim % 2 != 0) doc.fail("vision.rope.head_dim", "must be even");
  std::string layout = doc.str("vision.rope.layout");
  if (layout != "row-col-halves") doc.fail("vision.rope.layout", "must be \"row-col-halves\", not \""
      + layout + "\"");
  v.rope_full_width = table_width(doc, "vision.rope.table_width");
  if (!v.rope_full_width) doc.fail("vision.rope.table_width",
      "must be \"full\": a half-width table drops the column angle");
  v.rope_lowered = doc.boolean("vision.rope.lowered");
  v.patch_size = positive_int(doc, "vision.patch_size");
  v.merge_size = positive_int(doc, "vision.merge_size");
  if (v.merge_size != 1) doc.fail("vision.merge_size", "must be 1 for images");
  const NetFiles& enc = cfg.net("vision_encoder");
  for (const std::string* blob : {&v.hidden, &v.cos, &v.sin}) {
    if (std::find(enc.inputs.begin(), enc.inputs.end(), *blob) == enc.inputs.end())
      doc.fail("vision", "names blob \"" + *blob + "\", not an input of nets.vision_encoder");
  }
  if (std::find(enc.outputs.begin(), enc.outputs.end(), v.output) == enc.outputs.end())
    doc.fail("vision.output", "names blob \"" + v.output + "\", not an output of nets.vision_encoder");
  s.image_processor = doc.at("image_processor");
  if (!s.image_processor.is_object()) doc.fail("image_processor", "must be an object");
  if (doc.has("image_processor.patch_size") && doc.at("image_processor.patch_size").is_number_integer() &&
      doc.integer("image_processor.patch_size") != v.patch_size)
    doc.fail("image_processor.patch_size", "is " + std::to_string(doc.integer("image_processor.patch_size")) +
                                               ", but vision.patch_size is " + std::to_string(v.patch_size));
  int64_t image = doc.integer("tokens.image");
  if (image < 0 || image >= cfg.vocab_size) doc.fail("tokens.image", "is not an id below vocab_size");
  s.image_token = static_cast<int>(image);
}

}  // namespace gsurg

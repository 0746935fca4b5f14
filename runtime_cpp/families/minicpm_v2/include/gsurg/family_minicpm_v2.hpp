// The MiniCPM-V-2 family (model.json "family": "minicpm_v2", version 1; the file's contract is
// graphsurgeon/models/minicpm_v2/minicpm_v2.v1.schema.json, written by rules/minicpm_v2.yaml). What it adds
// to the core, each part computed from model.json's settings alone, as
// graphsurgeon/models/minicpm_v2/ncnn_chain.py does:
// - model.json: nets vision, pos_embed and resampler; the "vision" keys (the patch rows, the ViT's blobs,
//   the learned position table and how it is resampled), "resampler" (its blobs, query_num, the keys'
//   sin-cos rows), "image_processor" (the slicing: gsurg/minicpm_v2_image_processor.hpp), "prompt" (the
//   marker strings) and tokens image_start, image_end, slice_start, slice_end, placeholder, bos; each value
//   the runtime does not implement (another resampling, slice order, normalisation, RoPE layout) is refused
//   naming its key;
// - images: the official slicing (an overview, and a cols x rows grid of slices when the image is larger
//   than scale_resolution^2), each grid's patch rows; the overview is the PatchInput's own grid, the
//   slices its parts, row-major as the processor gives them (PatchInput::parts);
// - vision, per grid (the overview, then the slices in image_processor.slice_order): the learned table
//   (all its rows through the pos_embed net, once) resampled to the grid (minicpm_v2_positions.hpp:
//   torch's antialiased bicubic, the table itself at its own grid); the vision net on the patch rows and
//   those position rows; the resampler net on its output, the keys' 2-D sin-cos rows (sincos_2d) and the
//   query ids 0..query_num-1, giving query_num rows of hidden_size;
// - the prompt (the official chat, graphsurgeon/models/minicpm_v2/prompt.py): user marker, every image's
//   placeholder (image_start + query_num x placeholder + image_end for the overview; when sliced one
//   slice_start ... slice_end around the grid's rows, a row's slices concatenated, rows joined by "\n"),
//   then "\n" before the text when there are images, then the assistant marker; the BOS comes from
//   tokenizer.json's post-processor. Ids from the tokenizer and model.json, never constants;
// - fusion: the embed net's rows (muP's scale_emb is inside the net), the rows strictly between each
//   image_start and the next image_end overwritten by one grid's resampler rows, in order, unscaled;
// - positions: the plain 1-D RoPE (rotate-half) over 0..L-1, the core's TextPositions.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "gsurg/family.hpp"
#include "gsurg/family_registry.hpp"
#include "gsurg/model_config.hpp"
#include "gsurg/nets.hpp"

namespace gsurg {

struct MiniCpmV2Vision {
  int patch_size = 0, patch_dim = 0, hidden = 0, layers = 0, heads = 0;
  std::string net, rows, pos, output;        // vision.encoder
  std::string table_net, table_input, table_output;  // vision.position_embedding
  int table_rows = 0, grid_side = 0;
};

struct MiniCpmV2Resampler {
  std::string net, features, key_pos, query_ids, output;
  int query_num = 0, hidden = 0, heads = 0, key_dim = 0;
};

// The marker strings of model.json "prompt" and their ids ("tokens").
struct MiniCpmV2Prompt {
  std::string user, assistant, image_start, image_end, slice_start, slice_end, placeholder;
  int image_start_id = -1, image_end_id = -1, slice_start_id = -1, slice_end_id = -1, placeholder_id = -1;
  int bos_id = -1;
};

struct MiniCpmV2Settings {
  MiniCpmV2Vision vision;
  MiniCpmV2Resampler resampler;
  MiniCpmV2Prompt prompt;
  nlohmann::json image_processor;  // model.json "image_processor", checked (SliceConfig reads it)
  bool column_major = false;       // image_processor.slice_order "column-major" (else "row-major")
  std::string tokenizer_json;      // the core's path, for the prompt's errors
};

FamilyEntry minicpm_v2_entry();

// family_minicpm_v2_config.cpp: the family's model.json keys.
void read_minicpm_v2_settings(MiniCpmV2Settings& s, const JsonDoc& doc, const ModelConfig& cfg);

// The placeholder text of one image: its overview's span, then, when sliced (cols, rows > 0), one
// slice_start ... slice_end around the rows of the grid, a row's spans concatenated, rows joined by "\n".
std::string minicpm_v2_image_placeholder(const MiniCpmV2Prompt& p, int query_num, int cols, int rows);
// The chat text of one user turn: user marker, the images' placeholders one after the other and "\n"
// (only when there are images), the text, the assistant marker.
std::string minicpm_v2_chat_prompt(const MiniCpmV2Prompt& p, const std::string& user_text,
                                   const std::string& placeholders);

// [begin, end) of every image span of ids: after each image_start, up to the next image_end; gsurg::Error
// when the markers do not pair up.
std::vector<std::pair<int, int>> minicpm_v2_image_spans(const std::vector<int>& ids, const MiniCpmV2Prompt& p);

// The grids of the images in the order their spans come in the prompt: per image the overview, then its
// slices in slice_order (column_major: down the columns, else the processor's row-major order).
std::vector<const PatchInput*> minicpm_v2_grids(const std::vector<PatchInput>& images, bool column_major);

class MiniCpmV2VisionTower {
 public:
  MiniCpmV2VisionTower(const ModelConfig& cfg, const MiniCpmV2Settings& s, int threads);
  // One grid -> its resampler rows [query_num, hidden_size], row-major.
  std::vector<float> encode(const PatchInput& grid) const;

 private:
  const ModelConfig& cfg_;
  const MiniCpmV2Settings& s_;
  std::unique_ptr<LoadedNet> vision_, table_net_, resampler_;
  std::vector<float> table_;  // the learned position table [table_rows, vision.hidden], from table_net_
};

class MiniCpmV2Family : public Family {
 public:
  std::string name() const override;
  std::vector<std::string> net_names(const JsonDoc& doc) const override;
  std::vector<std::string> required_nets(const JsonDoc& doc) const override;
  void read_config(const JsonDoc& doc, const ModelConfig& cfg) override;
  void load_vision(const ModelConfig& cfg, int threads) override;
  ImagePreprocessor image_preprocessor() const override;
  std::vector<int> prompt_ids(const Tokenizer& tok, const std::string& user_text,
                              const std::vector<PatchInput>& images) const override;
  void check_prompt(const std::vector<int>& ids, const std::vector<PatchInput>& images) const override;
  // -1: every prompt row is embedded (as the reference does); fuse_images overwrites the image spans.
  int placeholder_id() const override { return -1; }
  std::vector<NetInput> fuse_images(const ModelConfig& cfg, const std::vector<int>& ids,
                                    const std::vector<PatchInput>& images,
                                    std::vector<float>& embeds) const override;
  std::unique_ptr<Positions> positions(const ModelConfig& cfg, const std::vector<int>& ids,
                                       const std::vector<PatchInput>& images) const override;

  const MiniCpmV2Settings& settings() const { return settings_; }

 private:
  MiniCpmV2Settings settings_;
  std::unique_ptr<MiniCpmV2VisionTower> tower_;
};

}  // namespace gsurg

// The Penguin-VL family (model.json "family": "penguin_vl", version 2; the file's contract is
// schemas/model_json/penguin_vl.v2.schema.json). What it adds to the core:
// - model.json: nets vision_embed_patch, vision_encoder, vision_projector; the "vision" keys (encoder
//   blobs, layers, the 2-D RoPE settings, patch and merge size), "image_processor" (a
//   preprocessor_config, handed to the Pillow-exact image processor as is) and tokens.image;
// - images: gsurg_preprocess's resize and normalisation, patches in raster order; the vision chain of
//   ncnn_chain.encode_image: vision_embed_patch -> vision_encoder (fed the 2-D RoPE tables computed here for
//   the grid) -> vision_projector -> features [N, hidden_size], checked against model.json at load;
// - the prompt of graphsurgeon/models/penguin_vl/processor.py (render_chat, user_prompt, expand_image_tokens;
//   penguin-vl.md §6): one user turn, its images first, each rendered as the image token followed by "\n",
//   then the text; "<|im_start|>{role}\n" + content + "<|im_end|>\n"; no system turn; the generation
//   prompt "<|im_start|>assistant\n<think>\n\n</think>\n\n". Each image's placeholder is repeated
//   grid_h*grid_w times. The template's marker strings are the chat template's text; every id comes from
//   the tokenizer (markers checked to exist) and model.json (the image id), never a constant;
// - fusion: the image features written, in order, over the rows of the image token;
// - positions: the core's 1-D TextPositions (no extra decoder inputs).
// The encoder's fused RoPE (model.json vision.rope.lowered false: RotaryEmbed 0=0 with full-width tables
// whose halves differ) is right only on ncnn >= 1.0.20261020; an older ncnn is refused at load.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gsurg/family.hpp"
#include "gsurg/family_registry.hpp"
#include "gsurg/model_config.hpp"
#include "gsurg/nets.hpp"

namespace gsurg {

struct PenguinVisionSettings {
  std::string hidden, cos, sin, output;  // vision_encoder blobs
  int layers = 0;
  double rope_theta = 0.0;
  int rope_head_dim = 0;
  bool rope_full_width = true;  // "table_width": "full" (the only layout a 2-D table can have)
  bool rope_lowered = false;    // true: explicit Slice/BinaryOp graph (any ncnn); false: RotaryEmbed 0=0
  int patch_size = 0;
  int merge_size = 1;
};

struct PenguinSettings {
  PenguinVisionSettings vision;
  nlohmann::json image_processor;  // a preprocessor_config
  int image_token = -1;            // model.json tokens.image
};

FamilyEntry penguin_vl_entry();

// family_penguin_vl_config.cpp: the family's model.json keys.
void read_penguin_settings(PenguinSettings& s, const JsonDoc& doc, const ModelConfig& cfg);

// The vision 2-D tables for a grid: patch p = r*grid_w + c in raster order, row angle r*f_i on the first
// half of each row and column angle c*f_i on the second (the same D/2 frequencies for both axes), full
// width [N, D] (penguin-vl.md §3); ncnn >= 1.0.20261020's RotaryEmbed applies the halves independently.
RopeTables penguin_vision_rope_tables(int grid_h, int grid_w, int head_dim, double theta);

class PenguinVisionTower {
 public:
  PenguinVisionTower(const ModelConfig& cfg, const PenguinSettings& s, int threads);
  // Features [grid_h*grid_w, hidden_size] row-major.
  std::vector<float> encode(const PatchInput& patches) const;

 private:
  const ModelConfig& cfg_;
  const PenguinSettings& s_;
  std::unique_ptr<LoadedNet> patch_, encoder_, projector_;
};

// vision.patch_size against the patch embedding's input width; the patch embedding's output, the
// encoder's input and output and the projector's input widths along the chain; hidden_size against the
// projector's output; vision.rope.head_dim against the width the encoder's RoPE tables rotate;
// vision.layers against the encoder's SDPA layers; every Input blob fed.
void check_penguin_vision_nets(const ModelConfig& cfg, const PenguinVisionSettings& v, const LoadedNet& patch,
                               const LoadedNet& encoder, const LoadedNet& projector);

// The rendered text with each image's placeholder expanded to its token count.
std::string penguin_chat_prompt(const std::string& user_text, const std::vector<int>& image_tokens,
                                const std::string& image_token);

class PenguinVlFamily : public Family {
 public:
  std::string name() const override;
  std::vector<std::string> net_names(const JsonDoc& doc) const override;
  std::vector<std::string> required_nets(const JsonDoc& doc) const override;
  void read_config(const JsonDoc& doc, const ModelConfig& cfg) override;
  void load_vision(const ModelConfig& cfg, int threads) override;
  ImagePreprocessor image_preprocessor() const override;
  // Throws gsurg::Error when the text is empty, holds the image token itself, the tokenizer lacks a
  // template marker, or the encoded ids do not hold exactly one image id per patch.
  std::vector<int> prompt_ids(const Tokenizer& tok, const std::string& user_text,
                              const std::vector<PatchInput>& images) const override;
  void check_prompt(const std::vector<int>& ids, const std::vector<PatchInput>& images) const override;
  int placeholder_id() const override { return settings_.image_token; }
  std::vector<NetInput> fuse_images(const ModelConfig& cfg, const std::vector<int>& ids,
                                    const std::vector<PatchInput>& images,
                                    std::vector<float>& embeds) const override;
  std::unique_ptr<Positions> positions(const ModelConfig& cfg, const std::vector<int>& ids,
                                       const std::vector<PatchInput>& images) const override;

  const PenguinSettings& settings() const { return settings_; }

 private:
  PenguinSettings settings_;
  std::unique_ptr<PenguinVisionTower> tower_;
};

}  // namespace gsurg

// The Qwen3-VL family (model.json "family": "qwen3_vl", version 1; the file's contract is
// schemas/model_json/qwen3_vl.v1.schema.json, written by rules/qwen3_vl.yaml). What it adds to the core,
// each part computed from model.json's settings alone, as graphsurgeon/models/qwen3_vl/ncnn_chain.py does:
// - model.json: nets patch_embed, pos_embed, vision, merger and one DeepStack merger per tap; the "vision"
//   keys (blobs, widths, the ViT's 2-D RoPE, the position table's grid side and interpolation, the taps),
//   "image_processor" (smart_resize and normalisation: gsurg/qwen3vl_image_processor.hpp), decoder.deepstack
//   and decoder.rope's mrope_section / layout, tokens image_pad, video_pad, vision_start, vision_end;
// - images: smart_resize (Python's round, ties to even), Pillow-exact bicubic, patches in merge-block
//   order, the frame repeated temporal_patch_size times;
// - vision, one call per image: patch_embed on the patches; the learned position table resampled to the
//   grid by bilinear interpolation (four taps per patch looked up with the pos_embed net and weighted
//   here, align_corners from model.json); the ViT's 2-D RoPE tables ([r*f, c*f, r*f, c*f]); the vision net,
//   whose DeepStack taps are read beside its output; the main merger and each tap's DeepStack merger on
//   the merge_size^2 rows of a block side by side;
// - the prompt of the tiny checkpoint's chat template (Qwen3-VL's): one user turn, each image as
//   <|vision_start|> + grid/merge^2 x <|image_pad|> + <|vision_end|>, then the text; no system turn; the
//   generation prompt "<|im_start|>assistant\n". Ids from the tokenizer and model.json, never constants;
// - fusion: the merger rows over the <|image_pad|> rows in order; DeepStack feature k on the same rows
//   (zeros elsewhere) as decoder input decoder.deepstack[k] on the prefill;
// - positions: Qwen3-VL's counter (text (p,p,p), p+1; an image of h' x w' merged tokens: token j at
//   (p, p + j / w', p + j % w'), then p += max(h', w')), as MRoPE tables in decoder.rope.layout:
//   "interleaved" (Qwen3-VL's): slot i reads H when i % 3 == 1 and i < 3*H, W when i % 3 == 2 and
//   i < 3*W, else T; "block" (Qwen2.5-VL's): the first T slots T, the next H slots H, the rest W
//   (graphsurgeon/verify/mrope.py).
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

struct Qwen3VlNetIo {
  std::string net, input, output;
};

struct Qwen3VlTap {
  int block = 0;
  std::string tap;            // a vision net output
  std::string merger;         // its DeepStack merger net
  std::string decoder_input;  // the decoder input it feeds on prefill
};

struct Qwen3VlVisionSettings {
  int patch_size = 0, temporal_patch_size = 0, in_channels = 0, merge_size = 0, patch_dim = 0;
  int hidden = 0, heads = 0, head_dim = 0, depth = 0, merged_width = 0, out_hidden = 0;
  Qwen3VlNetIo patch_embed, merger;
  std::string encoder_net, enc_hidden, enc_pos, enc_cos, enc_sin, enc_output;
  double rope_theta = 0.0;
  int rope_head_dim = 0;
  Qwen3VlNetIo pos_embed;
  int grid_side = 0;          // the learned table is grid_side x grid_side rows
  bool align_corners = true;
  std::vector<Qwen3VlTap> taps;
};

struct Qwen3VlSettings {
  Qwen3VlVisionSettings vision;
  nlohmann::json image_processor;  // model.json "image_processor"
  int mrope_t = 0, mrope_h = 0, mrope_w = 0;  // decoder.rope.mrope_section
  bool mrope_block = false;                   // decoder.rope.layout "block" (else "interleaved")
  int image_pad = -1, video_pad = -1, vision_start = -1, vision_end = -1;
};

FamilyEntry qwen3_vl_entry();

// family_qwen3_vl_config.cpp: the family's model.json keys.
void read_qwen3_vl_settings(Qwen3VlSettings& s, const JsonDoc& doc, const ModelConfig& cfg);

// Row and column of every patch of a gh x gw grid in merge-block order.
void merge_block_positions(int gh, int gw, int merge, std::vector<int>& rows, std::vector<int>& cols);
// The ViT's 2-D RoPE cos/sin [gh*gw, head_dim] in merge-block order.
RopeTables qwen3_vl_vision_rope_tables(int gh, int gw, int head_dim, double theta, int merge);
// The four bilinear taps of every patch on the side x side table, in patch order: ids[4*N] (tap-major:
// all of tap 0, then tap 1, ...) and weights[4*N], float32 as HF computes them.
void position_taps(int gh, int gw, int side, int merge, bool align_corners, std::vector<int>& ids,
                   std::vector<float>& weights);

// One image of the prompt: its first token index and merged token grid.
struct MropeImage {
  int first = 0, rows = 0, cols = 0;
};
// The (t, h, w) positions of a prompt whose image runs are `images` (in order), and the first decode
// position; throws gsurg::Error when a run does not fit the ids.
class MropePositions : public Positions {
 public:
  MropePositions(int length, const std::vector<MropeImage>& images, int head_dim, double theta, int sec_t,
                 int sec_h, int sec_w, bool block = false);
  RopeTables tables(int start, int rows) const override;
  int next_position() const { return next_; }
  const std::vector<int>& t() const { return t_; }
  const std::vector<int>& h() const { return h_; }
  const std::vector<int>& w() const { return w_; }

 private:
  std::vector<int> t_, h_, w_;
  std::vector<int> axis_;  // per slot: 0 T, 1 H, 2 W
  std::vector<float> inv_;
  int head_dim_;
  int next_ = 0;
};

// Vision outputs of one image: merger rows [N/merge^2, out_hidden] and each tap's DeepStack rows.
struct Qwen3VlFeatures {
  std::vector<float> merged;
  std::vector<std::vector<float>> deepstack;
};

class Qwen3VlVisionTower {
 public:
  Qwen3VlVisionTower(const ModelConfig& cfg, const Qwen3VlSettings& s, int threads);
  Qwen3VlFeatures encode(const PatchInput& patches) const;

 private:
  const ModelConfig& cfg_;
  const Qwen3VlSettings& s_;
  std::unique_ptr<LoadedNet> patch_, pos_, encoder_, merger_;
  std::vector<std::unique_ptr<LoadedNet>> deepstack_;
};

// The rendered text with each image's <|image_pad|> repeated to its token count.
std::string qwen3_vl_chat_prompt(const std::string& user_text, const std::vector<int>& image_tokens,
                                 const std::string& vision_start, const std::string& image_pad,
                                 const std::string& vision_end);

class Qwen3VlFamily : public Family {
 public:
  std::string name() const override;
  std::vector<std::string> net_names(const JsonDoc& doc) const override;
  std::vector<std::string> required_nets(const JsonDoc& doc) const override;
  void read_config(const JsonDoc& doc, const ModelConfig& cfg) override;
  std::vector<std::string> decoder_inputs() const override;
  void load_vision(const ModelConfig& cfg, int threads) override;
  ImagePreprocessor image_preprocessor() const override;
  std::vector<int> prompt_ids(const Tokenizer& tok, const std::string& user_text,
                              const std::vector<PatchInput>& images) const override;
  void check_prompt(const std::vector<int>& ids, const std::vector<PatchInput>& images) const override;
  int placeholder_id() const override { return settings_.image_pad; }
  std::vector<NetInput> fuse_images(const ModelConfig& cfg, const std::vector<int>& ids,
                                    const std::vector<PatchInput>& images,
                                    std::vector<float>& embeds) const override;
  std::unique_ptr<Positions> positions(const ModelConfig& cfg, const std::vector<int>& ids,
                                       const std::vector<PatchInput>& images) const override;

  const Qwen3VlSettings& settings() const { return settings_; }
  // The image runs of ids (each image's grid_h*grid_w/merge^2 consecutive <|image_pad|>); gsurg::Error
  // when the ids hold a <|video_pad|>, more or fewer runs than images, or a run of the wrong length.
  std::vector<MropeImage> image_runs(const std::vector<int>& ids,
                                     const std::vector<PatchInput>& images) const;

 private:
  Qwen3VlSettings settings_;
  std::unique_ptr<Qwen3VlVisionTower> tower_;
};

}  // namespace gsurg

// Qwen3-VL's vision half: merge-block positions, the ViT's 2-D RoPE tables, the bilinear taps of the
// learned position table, patch_embed -> vision (with its DeepStack taps) -> mergers, and the checks of
// those nets against model.json (see family_qwen3_vl.hpp). Every product and quotient of the tables and
// taps is float32, as HF computes them (graphsurgeon/models/qwen3_vl/vision_tables.py, ncnn_chain.py).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "gsurg/error.hpp"
#include "gsurg/family_qwen3_vl.hpp"
#include "gsurg/net_checks.hpp"
#include "gsurg/rope.hpp"

namespace gsurg {

void merge_block_positions(int gh, int gw, int merge, std::vector<int>& rows, std::vector<int>& cols) {
  if (gh < 1 || gw < 1 || merge < 1 || gh % merge != 0 || gw % merge != 0)
    throw Error("a " + std::to_string(gh) + "x" + std::to_string(gw) + " patch grid does not split into " +
                std::to_string(merge) + "x" + std::to_string(merge) + " merge blocks");
  rows.clear();
  cols.clear();
  rows.reserve(static_cast<size_t>(gh) * gw);
  cols.reserve(static_cast<size_t>(gh) * gw);
  for (int br = 0; br < gh / merge; ++br)
    for (int bc = 0; bc < gw / merge; ++bc)
      for (int r = 0; r < merge; ++r)
        for (int c = 0; c < merge; ++c) {
          rows.push_back(br * merge + r);
          cols.push_back(bc * merge + c);
        }
}

RopeTables qwen3_vl_vision_rope_tables(int gh, int gw, int head_dim, double theta, int merge) {
  std::vector<int> rows, cols;
  merge_block_positions(gh, gw, merge, rows, cols);
  const std::vector<float> inv = rope_inv_freq(head_dim / 2, theta);  // head_dim/4 frequencies
  const int quarter = head_dim / 4, half = head_dim / 2;
  RopeTables t = empty_tables(gh * gw, head_dim);
  for (size_t p = 0; p < rows.size(); ++p) {
    const int row = static_cast<int>(p);
    for (int k = 0; k < quarter; ++k) {
      const float r = static_cast<float>(rows[p]) * inv[static_cast<size_t>(k)];
      const float c = static_cast<float>(cols[p]) * inv[static_cast<size_t>(k)];
      put_angle(t, row, k, r);
      put_angle(t, row, quarter + k, c);
      put_angle(t, row, half + k, r);
      put_angle(t, row, half + quarter + k, c);
    }
  }
  return t;
}

namespace {

struct AxisTap {
  int lower, upper;
  float frac;
};

// Target position i of an axis of size entries onto side table entries.
AxisTap axis_tap(int i, int size, int side, bool align_corners) {
  float src;
  if (align_corners) {
    src = static_cast<float>(i) * static_cast<float>(side - 1) / static_cast<float>(std::max(size - 1, 1));
  } else {  // PyTorch's half-pixel convention, clamped at 0
    src = (static_cast<float>(i) + 0.5f) * static_cast<float>(side) / static_cast<float>(size) - 0.5f;
    src = std::max(src, 0.0f);
  }
  const float low = std::floor(src);
  const int lower = static_cast<int>(low);
  return AxisTap{lower, std::min(lower + 1, side - 1), src - low};
}

}  // namespace

void position_taps(int gh, int gw, int side, int merge, bool align_corners, std::vector<int>& ids,
                   std::vector<float>& weights) {
  std::vector<int> rows, cols;
  merge_block_positions(gh, gw, merge, rows, cols);
  const size_t n = rows.size();
  ids.assign(4 * n, 0);
  weights.assign(4 * n, 0.0f);
  for (size_t p = 0; p < n; ++p) {
    const AxisTap y = axis_tap(rows[p], gh, side, align_corners);
    const AxisTap x = axis_tap(cols[p], gw, side, align_corners);
    const float gy = 1.0f - y.frac, gx = 1.0f - x.frac;
    const int tap_ids[4] = {y.lower * side + x.lower, y.lower * side + x.upper, y.upper * side + x.lower,
                            y.upper * side + x.upper};
    const float tap_weights[4] = {gy * gx, gy * x.frac, y.frac * gx, y.frac * x.frac};
    for (size_t k = 0; k < 4; ++k) {
      ids[k * n + p] = tap_ids[k];
      weights[k * n + p] = tap_weights[k];
    }
  }
}

namespace {

void check_qwen3_vl_vision_nets(const ModelConfig& cfg, const Qwen3VlVisionSettings& v,
                                const LoadedNet& patch, const LoadedNet& pos, const LoadedNet& encoder, const LoadedNet& merger,
                                const std::vector<std::unique_ptr<LoadedNet>>& deepstack) {
  check_fed(patch, {v.patch_embed.input});
  check_fed(pos, {v.pos_embed.input});
  check_fed(encoder, {v.enc_hidden, v.enc_pos, v.enc_cos, v.enc_sin});
  check_fed(merger, {v.merger.input});
  check_claim(cfg, "vision.patch_dim", v.patch_dim, " values per patch", patch,
              patch.graph().input_width(v.patch_embed.input), "takes % per patch");
  check_claim(cfg, "vision.hidden", v.hidden, "", patch, patch.graph().output_width(v.patch_embed.output),
              "makes rows of %");
  check_chain(patch, v.patch_embed.output, encoder, v.enc_hidden);
  check_claim(cfg, "vision.hidden", v.hidden, "", pos, pos.graph().output_width(v.pos_embed.output),
              "makes rows of %");
  check_claim(cfg, "vision.merged_width", v.merged_width, "", merger,
              merger.graph().input_width(v.merger.input), "takes rows of %");
  check_claim(cfg, "hidden_size", cfg.hidden_size, "", merger, merger.graph().output_width(v.merger.output),
              "makes rows of %");
  for (const std::string* table : {&v.enc_cos, &v.enc_sin})
    check_claim(cfg, "vision.rope.head_dim", v.rope_head_dim, "", encoder, encoder.graph().rope_width(*table),
                "rotates heads of %");
  check_layer_count(cfg, "vision.depth", v.depth, encoder);
  for (size_t k = 0; k < deepstack.size(); ++k) {
    const LoadedNet& ds = *deepstack[k];
    check_fed(ds, {ds.files().inputs[0]});
    const std::string key = "vision.deepstack[" + std::to_string(k) + "]";
    check_claim(cfg, key, v.merged_width, " (vision.merged_width)", ds,
                ds.graph().input_width(ds.files().inputs[0]), "takes rows of %");
    check_claim(cfg, "hidden_size", cfg.hidden_size, "", ds, ds.graph().output_width(ds.files().outputs[0]),
                "makes rows of %");
  }
}

}  // namespace

Qwen3VlVisionTower::Qwen3VlVisionTower(const ModelConfig& cfg, const Qwen3VlSettings& s, int threads)
    : cfg_(cfg), s_(s) {
  const Qwen3VlVisionSettings& v = s.vision;
  patch_.reset(new LoadedNet(cfg.net(v.patch_embed.net), threads));
  pos_.reset(new LoadedNet(cfg.net(v.pos_embed.net), threads));
  encoder_.reset(new LoadedNet(cfg.net(v.encoder_net), threads));
  merger_.reset(new LoadedNet(cfg.net(v.merger.net), threads));
  for (const Qwen3VlTap& t : v.taps) deepstack_.emplace_back(new LoadedNet(cfg.net(t.merger), threads));
  check_qwen3_vl_vision_nets(cfg, v, *patch_, *pos_, *encoder_, *merger_, deepstack_);
}

Qwen3VlFeatures Qwen3VlVisionTower::encode(const PatchInput& in) const {
  const Qwen3VlVisionSettings& v = s_.vision;
  const int n = in.grid_h * in.grid_w;
  if (in.grid_h < 1 || in.grid_w < 1 || in.patch_dim < 1 ||
      in.data.size() != static_cast<size_t>(n) * static_cast<size_t>(in.patch_dim))
    throw Error("image patches of " + std::to_string(in.data.size()) + " values do not fill a " +
                std::to_string(in.grid_h) + "x" + std::to_string(in.grid_w) + " grid of " +
                std::to_string(in.patch_dim) + "-value patches");
  if (in.patch_dim != v.patch_dim)
    throw Error("image patches have " + std::to_string(in.patch_dim) +
                " values each; model.json vision.patch_dim is " + std::to_string(v.patch_dim));
  if (in.grid_h % v.merge_size != 0 || in.grid_w % v.merge_size != 0)
    throw Error("a " + std::to_string(in.grid_h) + "x" + std::to_string(in.grid_w) +
                " patch grid does not split into the " + std::to_string(v.merge_size) + "x" +
                std::to_string(v.merge_size) + " merge blocks of model.json vision.merge_size");

  ncnn::Mat patches = patch_->run(mat_2d(in.data.data(), n, in.patch_dim));
  const std::vector<float> embedded = mat_rows(patches, v.hidden, patch_->files().param + " output");
  if (embedded.size() != static_cast<size_t>(n) * v.hidden)
    throw Error(patch_->files().param + ": expected " + std::to_string(n) + " patch embeddings");

  // The position table resampled to the grid: four rows per patch, weighted and summed in tap order.
  std::vector<int> ids;
  std::vector<float> weights;
  position_taps(in.grid_h, in.grid_w, v.grid_side, v.merge_size, v.align_corners, ids, weights);
  ncnn::Mat id_mat(static_cast<int>(ids.size()), static_cast<size_t>(4u));
  std::memcpy(id_mat.data, ids.data(), ids.size() * sizeof(int));
  const std::vector<float> tapped = mat_rows(pos_->run(id_mat), v.hidden, pos_->files().param + " output");
  if (tapped.size() != ids.size() * static_cast<size_t>(v.hidden))
    throw Error(pos_->files().param + ": expected " + std::to_string(ids.size()) + " position rows");
  const size_t c = static_cast<size_t>(v.hidden), rows = static_cast<size_t>(n);
  std::vector<float> pos(rows * c);
  for (size_t p = 0; p < rows; ++p) {
    for (size_t j = 0; j < c; ++j) {
      float sum = tapped[p * c + j] * weights[p];
      for (size_t k = 1; k < 4; ++k) sum = sum + tapped[(k * rows + p) * c + j] * weights[k * rows + p];
      pos[p * c + j] = sum;
    }
  }

  const RopeTables rope =
      qwen3_vl_vision_rope_tables(in.grid_h, in.grid_w, v.rope_head_dim, v.rope_theta, v.merge_size);
  std::vector<float> last;
  std::vector<std::vector<float>> taps;
  {
    ncnn::Extractor ex = encoder_->extractor();
    encoder_->input(ex, v.enc_hidden, mat_2d(embedded.data(), n, v.hidden));
    encoder_->input(ex, v.enc_pos, mat_2d(pos.data(), n, v.hidden));
    encoder_->input(ex, v.enc_cos, mat_2d(rope.cos.data(), rope.rows, rope.width));
    encoder_->input(ex, v.enc_sin, mat_2d(rope.sin.data(), rope.rows, rope.width));
    const std::string what = encoder_->files().param + " output";
    last = mat_rows(encoder_->extract(ex, v.enc_output), v.hidden, what);
    for (const Qwen3VlTap& t : v.taps) taps.push_back(mat_rows(encoder_->extract(ex, t.tap), v.hidden, what));
  }
  if (last.size() != rows * c)
    throw Error(encoder_->files().param + ": the encoder output \"" + v.enc_output + "\" is not [" +
                std::to_string(n) + ", " + std::to_string(v.hidden) + "]");

  // A merge block's rows side by side: the merge-block order makes that a reshape.
  const int blocks = n / (v.merge_size * v.merge_size);
  Qwen3VlFeatures out;
  out.merged = mat_rows(merger_->run(mat_2d(last.data(), blocks, v.merged_width)), cfg_.hidden_size,
                        merger_->files().param + " output");
  for (size_t k = 0; k < taps.size(); ++k) {
    if (taps[k].size() != rows * c)
      throw Error(encoder_->files().param + ": the DeepStack tap \"" + v.taps[k].tap + "\" is not [" +
                  std::to_string(n) + ", " + std::to_string(v.hidden) + "]");
    const LoadedNet& ds = *deepstack_[k];
    out.deepstack.push_back(mat_rows(ds.run(mat_2d(taps[k].data(), blocks, v.merged_width)), cfg_.hidden_size,
                                     ds.files().param + " output"));
  }
  if (out.merged.size() != static_cast<size_t>(blocks) * cfg_.hidden_size)
    throw Error(merger_->files().param + ": expected " + std::to_string(blocks) + " merged rows");
  return out;
}

}  // namespace gsurg

// Patch embed -> encoder with 2-D RoPE tables -> projector (see vision.hpp).
#include "pvl/vision.hpp"

#include <platform.h>

#include "pvl/error.hpp"
#include "pvl/net_checks.hpp"
#include "pvl/rope.hpp"

namespace pvl {

VisionTower::VisionTower(const ModelConfig& cfg, int threads) : cfg_(cfg) {
#if defined(NCNN_VERSION_NUMBER)
  if (!cfg.vision.rope_lowered && NCNN_VERSION_NUMBER < 20261020)
    throw Error(cfg.json_path
        + ": vision.rope.lowered is false (fused RotaryEmbed with full-width 2-D tables), "
                "which needs ncnn >= 1.0.20261020; this runtime is built with ncnn " NCNN_VERSION_STRING
                " (convert with --set rope=explicit)");
#endif
  patch_.reset(new LoadedNet(cfg.net("vision_embed_patch"), threads));
  encoder_.reset(new LoadedNet(cfg.net("vision_encoder"), threads));
  projector_.reset(new LoadedNet(cfg.net("vision_projector"), threads));
  check_vision_nets(cfg, *patch_, *encoder_, *projector_);
}

std::vector<float> VisionTower::encode(const PatchInput& in) const {
  const int n = in.grid_h * in.grid_w;
  if (in.grid_h < 1 || in.grid_w < 1 || in.patch_dim < 1 ||
      in.data.size() != static_cast<size_t>(n) * static_cast<size_t>(in.patch_dim))
    throw Error("image patches of " + std::to_string(in.data.size()) + " values do not fill a " +
                std::to_string(in.grid_h) + "x" + std::to_string(in.grid_w) + " grid of " +
                std::to_string(in.patch_dim) + "-value patches");
  const int expected_dim = 3 * cfg_.vision.patch_size * cfg_.vision.patch_size;  // RGB patches
  if (in.patch_dim != expected_dim)
    throw Error("image patches have " + std::to_string(in.patch_dim)
        + " values each; model.json vision.patch_size " +
                std::to_string(cfg_.vision.patch_size) + " needs " + std::to_string(expected_dim));
  ncnn::Mat x = patch_->run(mat_2d(in.data.data(), n, in.patch_dim));
  if (x.dims != 2 || x.h != n)
    throw Error(patch_->files().param + ": expected [" + std::to_string(n)
        + ", width] patch embeddings, got dims " +
                std::to_string(x.dims) + " h " + std::to_string(x.h) + " (does patch_dim " +
                std::to_string(in.patch_dim) + " fit this net?)");
  const VisionSettings& v = cfg_.vision;
  RopeTables rope = vision_rope_tables(in.grid_h, in.grid_w, v.rope_head_dim, v.rope_theta);
  ncnn::Mat encoded;
  {
    ncnn::Extractor ex = encoder_->extractor();
    encoder_->input(ex, v.hidden, x);
    encoder_->input(ex, v.cos, mat_2d(rope.cos.data(), rope.rows, rope.width));
    encoder_->input(ex, v.sin, mat_2d(rope.sin.data(), rope.rows, rope.width));
    encoded = encoder_->extract(ex, v.output);
  }
  if (encoded.dims != 2 || encoded.h != n)
    throw Error(encoder_->files().param + ": the encoder output \"" + v.output + "\" is not ["
        + std::to_string(n) +
                ", width]");
  ncnn::Mat projected = projector_->run(encoded);
  return mat_rows(projected, cfg_.hidden_size, projector_->files().param + " output");
}

}  // namespace pvl

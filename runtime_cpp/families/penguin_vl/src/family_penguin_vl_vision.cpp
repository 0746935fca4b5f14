// Penguin-VL's vision half: 2-D RoPE tables, patch embed -> encoder -> projector, and the checks of those
// nets against model.json (see family_penguin_vl.hpp).
#include <platform.h>

#include "gsurg/error.hpp"
#include "gsurg/family_penguin_vl.hpp"
#include "gsurg/net_checks.hpp"
#include "gsurg/rope.hpp"

namespace gsurg {

RopeTables penguin_vision_rope_tables(int grid_h, int grid_w, int head_dim, double theta) {
  const std::vector<float> inv = rope_inv_freq(head_dim, theta);
  const int half = head_dim / 2;
  RopeTables t = empty_tables(grid_h * grid_w, head_dim);
  for (int r = 0; r < grid_h; ++r) {
    for (int c = 0; c < grid_w; ++c) {
      const int p = r * grid_w + c;
      for (int i = 0; i < half; ++i) {
        put_angle(t, p, i, static_cast<float>(r) * inv[static_cast<size_t>(i)]);
        put_angle(t, p, half + i, static_cast<float>(c) * inv[static_cast<size_t>(i)]);
      }
    }
  }
  return t;
}

void check_penguin_vision_nets(const ModelConfig& cfg, const PenguinVisionSettings& v, const LoadedNet& patch,
                               const LoadedNet& encoder, const LoadedNet& projector) {
  check_fed(patch, {patch.files().inputs[0]});
  check_fed(encoder, {v.hidden, v.cos, v.sin});
  check_fed(projector, {projector.files().inputs[0]});
  const long long p = v.patch_size;
  check_claim(cfg, "vision.patch_size", p,
              " (3x" + std::to_string(p) + "x" + std::to_string(p) + " = " + std::to_string(3 * p * p) +
                  " values per patch)",
              patch, patch.graph().input_width(patch.files().inputs[0]), "takes % per patch", 3 * p * p);
  check_chain(patch, patch.files().outputs[0], encoder, v.hidden);
  check_chain(encoder, v.output, projector, projector.files().inputs[0]);
  check_claim(cfg, "hidden_size", cfg.hidden_size, "", projector,
              projector.graph().output_width(projector.files().outputs[0]), "makes rows of %");
  for (const std::string* table : {&v.cos, &v.sin})
    check_claim(cfg, "vision.rope.head_dim", v.rope_head_dim, "", encoder, encoder.graph().rope_width(*table),
                "rotates heads of %");
  check_layer_count(cfg, "vision.layers", v.layers, encoder);
}

PenguinVisionTower::PenguinVisionTower(const ModelConfig& cfg, const PenguinSettings& s, int threads)
    : cfg_(cfg), s_(s) {
#if defined(NCNN_VERSION_NUMBER)
  if (!s.vision.rope_lowered && NCNN_VERSION_NUMBER < 20261020)
    throw Error(cfg.json_path
        + ": vision.rope.lowered is false (fused RotaryEmbed with full-width 2-D tables), "
                "which needs ncnn >= 1.0.20261020; this runtime is built with ncnn " NCNN_VERSION_STRING
                " (convert with --set rope=explicit)");
#endif
  patch_.reset(new LoadedNet(cfg.net("vision_embed_patch"), threads));
  encoder_.reset(new LoadedNet(cfg.net("vision_encoder"), threads));
  projector_.reset(new LoadedNet(cfg.net("vision_projector"), threads));
  check_penguin_vision_nets(cfg, s.vision, *patch_, *encoder_, *projector_);
}

std::vector<float> PenguinVisionTower::encode(const PatchInput& in) const {
  const int n = in.grid_h * in.grid_w;
  if (in.grid_h < 1 || in.grid_w < 1 || in.patch_dim < 1 ||
      in.data.size() != static_cast<size_t>(n) * static_cast<size_t>(in.patch_dim))
    throw Error("image patches of " + std::to_string(in.data.size()) + " values do not fill a " +
                std::to_string(in.grid_h) + "x" + std::to_string(in.grid_w) + " grid of " +
                std::to_string(in.patch_dim) + "-value patches");
  const int expected_dim = 3 * s_.vision.patch_size * s_.vision.patch_size;  // RGB patches
  if (in.patch_dim != expected_dim)
    throw Error("image patches have " + std::to_string(in.patch_dim)
        + " values each; model.json vision.patch_size " +
                std::to_string(s_.vision.patch_size) + " needs " + std::to_string(expected_dim));
  ncnn::Mat x = patch_->run(mat_2d(in.data.data(), n, in.patch_dim));
  if (x.dims != 2 || x.h != n)
    throw Error(patch_->files().param + ": expected [" + std::to_string(n)
        + ", width] patch embeddings, got dims " +
                std::to_string(x.dims) + " h " + std::to_string(x.h) + " (does patch_dim " +
                std::to_string(in.patch_dim) + " fit this net?)");
  const PenguinVisionSettings& v = s_.vision;
  RopeTables rope = penguin_vision_rope_tables(in.grid_h, in.grid_w, v.rope_head_dim, v.rope_theta);
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

}  // namespace gsurg

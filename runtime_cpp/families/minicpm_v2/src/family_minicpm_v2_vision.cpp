// MiniCPM-V-2's vision half: the learned position table through the pos_embed net, its resampling to each
// grid, the vision net, the resampler's sin-cos keys and query ids, the resampler net; and the checks of
// those nets against model.json (see family_minicpm_v2.hpp).
#include <set>
#include <string>

#include "gsurg/error.hpp"
#include "gsurg/family_minicpm_v2.hpp"
#include "gsurg/minicpm_v2_positions.hpp"
#include "gsurg/net_checks.hpp"

namespace gsurg {

namespace {

// ids 0..count-1 as the int32 1-D Mat ncnn's Embed reads.
ncnn::Mat id_mat(int count) {
  ncnn::Mat m(count, static_cast<size_t>(4u));
  int* p = static_cast<int*>(m.data);
  for (int i = 0; i < count; ++i) p[i] = i;
  return m;
}

// The rows of every Embed layer an id input feeds (through Split): each must hold at least `rows` rows, or
// ncnn would clamp the ids past its table to its last row.
void check_embed_rows(const ModelConfig& cfg, const std::string& key, int rows, const LoadedNet& net,
                      const std::string& blob) {
  std::set<std::string> reach = {blob};
  for (const ParamLayer& layer : net.graph().layers()) {
    bool fed = false;
    for (const std::string& b : layer.bottoms) fed = fed || reach.count(b) > 0;
    if (!fed) continue;
    if (layer.type == "Split") reach.insert(layer.tops.begin(), layer.tops.end());
    if (layer.type == "Embed" && layer.get(1, 0) != rows)
      throw Error(cfg.json_path + ": entry \"" + key + "\" is " + std::to_string(rows) + ", but " + net_ref(net) +
                  "'s Embed \"" + layer.name + "\" looks up " + std::to_string(layer.get(1, 0)) + " rows");
  }
}

void check_vision_nets(const ModelConfig& cfg, const MiniCpmV2Settings& s, const LoadedNet& vision,
                       const LoadedNet& table, const LoadedNet& resampler) {
  const MiniCpmV2Vision& v = s.vision;
  const MiniCpmV2Resampler& r = s.resampler;
  check_fed(vision, {v.rows, v.pos});
  check_fed(table, {v.table_input});
  check_fed(resampler, {r.features, r.key_pos, r.query_ids});
  const ParamGraph& vg = vision.graph();
  check_claim(cfg, "vision.patch_dim", v.patch_dim, "", vision, vg.input_width(v.rows), "takes patch rows of %");
  check_claim(cfg, "vision.hidden", v.hidden, "", vision, vg.input_width(v.pos), "takes position rows of %");
  check_claim(cfg, "vision.hidden", v.hidden, "", vision, vg.output_width(v.output), "makes rows of %");
  check_claim(cfg, "vision.hidden", v.hidden, "", table, table.graph().output_width(v.table_output),
              "makes rows of %");
  check_embed_rows(cfg, "vision.position_embedding.shape", v.table_rows, table, v.table_input);
  check_layer_count(cfg, "vision.layers", v.layers, vision);
  const ParamGraph& rg = resampler.graph();
  check_claim(cfg, "vision.hidden", v.hidden, "", resampler, rg.input_width(r.features), "takes features of %");
  check_claim(cfg, "resampler.key_pos_embedding.dim", r.key_dim, "", resampler, rg.input_width(r.key_pos),
              "takes key rows of %");
  check_claim(cfg, "hidden_size", cfg.hidden_size, "", resampler, rg.output_width(r.output), "makes rows of %");
  check_embed_rows(cfg, "resampler.query_num", r.query_num, resampler, r.query_ids);
}

}  // namespace

MiniCpmV2VisionTower::MiniCpmV2VisionTower(const ModelConfig& cfg, const MiniCpmV2Settings& s, int threads)
    : cfg_(cfg), s_(s) {
  vision_.reset(new LoadedNet(cfg.net(s.vision.net), threads));
  table_net_.reset(new LoadedNet(cfg.net(s.vision.table_net), threads));
  resampler_.reset(new LoadedNet(cfg.net(s.resampler.net), threads));
  check_vision_nets(cfg, s, *vision_, *table_net_, *resampler_);
  ncnn::Mat rows;
  {
    ncnn::Extractor ex = table_net_->extractor();
    table_net_->input(ex, s.vision.table_input, id_mat(s.vision.table_rows));
    rows = table_net_->extract(ex, s.vision.table_output);
  }
  table_ = mat_rows(rows, s.vision.hidden, table_net_->files().param + " output");
  if (table_.size() != static_cast<size_t>(s.vision.table_rows) * s.vision.hidden)
    throw Error(table_net_->files().param + ": the position table has " +
                std::to_string(table_.size() / static_cast<size_t>(s.vision.hidden)) + " rows, not " +
                std::to_string(s.vision.table_rows) + " (model.json vision.position_embedding.shape)");
}

std::vector<float> MiniCpmV2VisionTower::encode(const PatchInput& in) const {
  const MiniCpmV2Vision& v = s_.vision;
  const MiniCpmV2Resampler& r = s_.resampler;
  const int n = in.grid_h * in.grid_w;
  if (in.grid_h < 1 || in.grid_w < 1 || in.patch_dim < 1 ||
      in.data.size() != static_cast<size_t>(n) * static_cast<size_t>(in.patch_dim))
    throw Error("image patches of " + std::to_string(in.data.size()) + " values do not fill a " +
                std::to_string(in.grid_h) + "x" + std::to_string(in.grid_w) + " grid of " +
                std::to_string(in.patch_dim) + "-value patches");
  if (in.patch_dim != v.patch_dim)
    throw Error("image patches have " + std::to_string(in.patch_dim) +
                " values each; model.json vision.patch_dim is " +
                std::to_string(v.patch_dim));
  const std::vector<float> pos =
      minicpm_v2::resample_pos_table(table_, v.grid_side, v.hidden, in.grid_h, in.grid_w);
  ncnn::Mat features;
  {
    ncnn::Extractor ex = vision_->extractor();
    vision_->input(ex, v.rows, mat_2d(in.data.data(), n, in.patch_dim));
    vision_->input(ex, v.pos, mat_2d(pos.data(), n, v.hidden));
    features = vision_->extract(ex, v.output);
  }
  if (features.dims == 1 && n == 1) features = features.reshape(features.w, 1);
  if (features.dims != 2 || features.h != n || features.w != v.hidden)
    throw Error(vision_->files().param + ": the vision output \"" + v.output + "\" is not [" + std::to_string(n) +
                ", " + std::to_string(v.hidden) + "]");
  const std::vector<float> keys = minicpm_v2::sincos_2d(r.key_dim, in.grid_h, in.grid_w);
  ncnn::Mat out;
  {
    ncnn::Extractor ex = resampler_->extractor();
    resampler_->input(ex, r.features, features);
    resampler_->input(ex, r.key_pos, mat_2d(keys.data(), n, r.key_dim));
    resampler_->input(ex, r.query_ids, id_mat(r.query_num));
    out = resampler_->extract(ex, r.output);
  }
  if (out.dims == 1 && r.query_num == 1) out = out.reshape(out.w, 1);
  std::vector<float> rows = mat_rows(out, cfg_.hidden_size, resampler_->files().param + " output");
  if (rows.size() != static_cast<size_t>(r.query_num) * static_cast<size_t>(cfg_.hidden_size))
    throw Error(resampler_->files().param + ": the resampler gave " +
                std::to_string(rows.size() / static_cast<size_t>(cfg_.hidden_size)) +
                " rows, not resampler.query_num " + std::to_string(r.query_num));
  return rows;
}

}  // namespace gsurg

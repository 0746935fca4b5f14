// A .param's layers and the widths their params fix (see param_graph.hpp).
#include "gsurg/param_graph.hpp"

#include <cstdlib>

#include <datareader.h>
#include <paramdict.h>

#include "gsurg/error.hpp"
#include "gsurg/files.hpp"

namespace gsurg {

namespace {

// ncnn::ParamDict's text reader is protected (Net is its friend); this exposes exactly that reader.
class ScannedParams : public ncnn::ParamDict {
 public:
  using ncnn::ParamDict::load_param;
};

const int kMaxDepth = 64;  // width walks follow at most this many pass-through layers

bool passes_width(const ParamLayer& l) {
  static const char* const kSame[] = {"Split", "GELU",  "Swish",   "ReLU",     "Sigmoid",   "TanH",
                                      "Mish",  "ELU",   "Dropout", "Noop",     "HardSwish", "HardSigmoid",
                                      "Clip",  "Erf",   "UnaryOp", "BinaryOp", "Eltwise",   "SELU"};
  for (const char* t : kSame) {
    if (l.type == t) return true;
  }
  // Permute orders 0 (identity) and 2 (w c h for 3-D) keep the row width.
  return l.type == "Permute" && (l.get(0, 0) == 0 || l.get(0, 0) == 2);
}

// A Reshape's row width: w, or the leading integer of its shape expression ("32,4,0h" -> 32).
long long reshape_width(const ParamLayer& l) {
  const int w = l.get(0, -233);
  if (w > 0) return w;
  const std::string expr = l.get_string(6);
  if (expr.empty()) return 0;
  char* end = nullptr;
  const long v = std::strtol(expr.c_str(), &end, 10);
  return end != expr.c_str() && (*end == ',' || *end == '\0') && v > 0 ? v : 0;
}

std::string describe(const ParamLayer& l, const char* what) {
  return l.type + " \"" + l.name + "\" " + what;
}

}  // namespace

int ParamLayer::get(int id, int def) const { return params->get(id, def); }

std::string ParamLayer::get_string(int id) const {
  return params->type(id) == 7 ? params->get(id, std::string()) : std::string();
}

ParamGraph ParamGraph::read(const std::string& param_path) {
  ParamGraph g;
  g.path_ = param_path;
  const std::string text = read_file(param_path);
  const unsigned char* mem = reinterpret_cast<const unsigned char*>(text.c_str());
  ncnn::DataReaderFromMemory dr(mem, text.size());
  auto fail = [&](const std::string& what) -> void { throw Error(param_path + ": " + what); };
  int magic = 0, layer_count = 0, blob_count = 0;
  if (dr.scan("%d", &magic) != 1 || dr.scan("%d", &layer_count) != 1 || dr.scan("%d", &blob_count) != 1 ||
      layer_count < 1)
    fail("cannot read the header");
  char token[256];
  auto word = [&](int layer) {
    if (dr.scan("%255s", token) != 1) fail("cannot read layer " + std::to_string(layer));
    return std::string(token);
  };
  for (int i = 0; i < layer_count; ++i) {
    ParamLayer l;
    l.type = word(i);
    l.name = word(i);
    int nb = 0, nt = 0;
    if (dr.scan("%d", &nb) != 1 || dr.scan("%d", &nt) != 1 || nb < 0 || nt < 0)
      fail("layer " + std::to_string(i) + " \"" + l.name + "\": cannot read its blob counts");
    for (int k = 0; k < nb; ++k) l.bottoms.push_back(word(i));
    for (int k = 0; k < nt; ++k) l.tops.push_back(word(i));
    auto pd = std::make_shared<ScannedParams>();
    if (pd->load_param(dr) != 0) fail("layer " + std::to_string(i) + " \"" + l.name + "\": bad params");
    l.params = pd;
    for (const auto& b : l.bottoms) g.consumers_[b].push_back(i);
    for (const auto& t : l.tops) g.producer_[t] = i;
    g.layers_.push_back(std::move(l));
  }
  return g;
}

std::vector<std::string> ParamGraph::input_blobs() const {
  std::vector<std::string> out;
  for (const ParamLayer& l : layers_) {
    if (l.type == "Input") out.insert(out.end(), l.tops.begin(), l.tops.end());
  }
  return out;
}

int ParamGraph::count(const std::string& type) const {
  int n = 0;
  for (const ParamLayer& l : layers_) n += l.type == type;
  return n;
}

std::vector<int> ParamGraph::consumers(const std::string& blob) const {
  auto it = consumers_.find(blob);
  return it == consumers_.end() ? std::vector<int>() : it->second;
}

int ParamGraph::producer(const std::string& blob) const {
  auto it = producer_.find(blob);
  return it == producer_.end() ? -1 : it->second;
}

Width ParamGraph::forward(const std::string& blob, int depth) const {
  if (depth > kMaxDepth) return {};
  for (int i : consumers(blob)) {
    const ParamLayer& l = layers_[static_cast<size_t>(i)];
    const bool first = !l.bottoms.empty() && l.bottoms[0] == blob;
    if (l.type == "Gemm" && first && l.get(5, 0) == 1 && l.get(2, 0) == 0 && l.get(9, 0) > 0)
      return {l.get(9, 0), describe(l, "K")};
    if (l.type == "InnerProduct" && l.get(0, 0) > 0 && l.get(2, 0) > 0)
      return {l.get(2, 0) / l.get(0, 0), describe(l, "weight_data_size / num_output")};
    if ((l.type == "RMSNorm" || l.type == "LayerNorm") && l.get(0, 0) > 0)
      return {l.get(0, 0), describe(l, "affine_size")};
    if (passes_width(l)) {
      for (const auto& top : l.tops) {
        Width w = forward(top, depth + 1);
        if (w.value > 0) return w;
      }
    }
  }
  return {};
}

Width ParamGraph::backward(const std::string& blob, int depth) const {
  const int i = producer(blob);
  if (i < 0 || depth > kMaxDepth) return {};
  const ParamLayer& l = layers_[static_cast<size_t>(i)];
  if (l.type == "Gemm" && l.get(5, 0) == 1 && l.get(14, 0) == 0 && l.get(8, 0) > 0)
    return {l.get(8, 0), describe(l, "N")};
  if ((l.type == "InnerProduct" || l.type == "Embed") && l.get(0, 0) > 0)
    return {l.get(0, 0), describe(l, "num_output")};
  if ((l.type == "RMSNorm" || l.type == "LayerNorm") && l.get(0, 0) > 0)
    return {l.get(0, 0), describe(l, "affine_size")};
  if (l.type == "Reshape") {
    const long long w = reshape_width(l);
    return w > 0 ? Width{w, describe(l, "w")} : Width{};
  }
  if (passes_width(l)) {
    for (const auto& bottom : l.bottoms) {
      Width w = backward(bottom, depth + 1);
      if (w.value > 0) return w;
    }
  }
  return {};
}

Width ParamGraph::input_width(const std::string& blob) const { return forward(blob, 0); }

Width ParamGraph::output_width(const std::string& blob) const { return backward(blob, 0); }

Width ParamGraph::rope_width(const std::string& table_blob) const {
  std::vector<std::string> blobs = {table_blob};
  for (size_t k = 0; k < blobs.size() && k < 256; ++k) {
    for (int i : consumers(blobs[k])) {
      const ParamLayer& l = layers_[static_cast<size_t>(i)];
      if (l.type == "Split") {
        blobs.insert(blobs.end(), l.tops.begin(), l.tops.end());
      } else if (l.type == "RotaryEmbed" && !l.bottoms.empty() && l.bottoms[0] != blobs[k]) {
        Width w = output_width(l.bottoms[0]);
        if (w.value > 0) return {w.value, w.layer + " (rotated by " + l.type + " \"" + l.name + "\")"};
      } else if (l.type == "BinaryOp") {  // lowered RoPE: x * cos, rotate_half(x) * sin
        for (const auto& other : l.bottoms) {
          if (other == blobs[k]) continue;
          Width w = output_width(other);
          if (w.value > 0) return {w.value, w.layer + " (multiplied in " + l.type + " \"" + l.name + "\")"};
        }
      }
    }
  }
  return {};
}

}  // namespace gsurg

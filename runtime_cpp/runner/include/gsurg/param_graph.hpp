// The layer graph of one ncnn .param, read with ncnn's own parsers (the header tokens as Net::load_param
// scans them, each layer's key=value list through ncnn::ParamDict), so the runtime can compare what
// model.json claims with what the net really is before anything runs: the widths its interface blobs
// must have (fixed by the weights of the first layer that consumes them, or of the last that produces
// them) and the head width its RoPE tables must have.
//
// Contract:
//   - ParamGraph::read(path) expects a .param ncnn has already accepted; anything it cannot scan is a
//     gsurg::Error naming the file and layer.
//   - A width query returns a Width {value, layer, how}; value 0 means the graph does not fix the width
//     (e.g. only shape-agnostic layers touch the blob), and then nothing can be checked.
//   - Only layers whose params state a width are read: Gemm with a constant B (K = 9, N = 8), InnerProduct
//     (num_output 0, weight_data_size 2), Embed (num_output 0, input_dim 1), RMSNorm / LayerNorm
//     (affine_size 0), Reshape (an integer w, or a leading integer of its shape expression). Split,
//     activations and element-wise BinaryOp pass a width through unchanged.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ncnn {
class ParamDict;
}

namespace gsurg {

struct ParamLayer {
  std::string type, name;
  std::vector<std::string> bottoms, tops;
  std::shared_ptr<const ncnn::ParamDict> params;
  int get(int id, int def) const;  // an int param (def when absent)
  std::string get_string(int id) const;  // a string param ("" when absent)
};

struct Width {
  long long value = 0;  // 0: not fixed by the graph
  std::string layer;    // the layer that fixes it: "Gemm \"linear0\" K"
};

class ParamGraph {
 public:
  static ParamGraph read(const std::string& param_path);

  const std::vector<ParamLayer>& layers() const { return layers_; }
  // The blobs produced by Input layers, in file order.
  std::vector<std::string> input_blobs() const;
  // Values per row a consumer of blob expects (walking forward through width-preserving layers).
  Width input_width(const std::string& blob) const;
  // Values per row of blob as its producer makes them (walking back through width-preserving layers).
  Width output_width(const std::string& blob) const;
  // The head width of the rotations a RoPE table blob feeds: for each RotaryEmbed consuming it (through
  // Split), the width of the rotated tensor's rows. 0 when no RotaryEmbed consumes it.
  Width rope_width(const std::string& table_blob) const;
  int count(const std::string& type) const;

 private:
  std::vector<int> consumers(const std::string& blob) const;
  int producer(const std::string& blob) const;
  Width forward(const std::string& blob, int depth) const;
  Width backward(const std::string& blob, int depth) const;

  std::string path_;
  std::vector<ParamLayer> layers_;
  std::map<std::string, int> producer_;
  std::map<std::string, std::vector<int>> consumers_;
};

}  // namespace gsurg

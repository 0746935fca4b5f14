// One converted ncnn net loaded the way the families' Python chains (ncnn_chain.py) load it (exact fp32: fp16 and
// bf16 storage, packing and arithmetic off, packing layout off; the thread count set before loading,
// because Gemm packs its weights for it), with checks a bare ncnn load does not make: the .param parses,
// the .bin is consumed exactly (a .bin of another .param is refused, naming both), and every interface
// blob model.json names is an input / output of the graph. graph() keeps the .param's layers and params
// for the checks of net_checks.hpp. The .bin is memory-mapped where the platform allows (NetFiles::
// map_weights): ncnn then references each weight in the mapping rather than allocating and filling a copy,
// the layers that repack (Gemm) read straight from the page cache, and the pages a finished layer no longer
// needs leave the resident set as loading moves on; with exact fp32 options, a Gemm weight stored bf16 or
// fp16 is widened by the runner on the run's threads into one reused buffer (weight_widening.hpp) rather
// than by ncnn into a fresh one per weight. Helpers turn row-major float buffers into 2-D Mats
// and back, and run a one-input one-output net; every ncnn failure is a gsurg::Error naming net and blob.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <net.h>

#include "gsurg/mapped_file.hpp"
#include "gsurg/model_config.hpp"
#include "gsurg/param_graph.hpp"
#include "gsurg/weight_widening.hpp"

namespace gsurg {

class LoadedNet {
 public:
  LoadedNet(const NetFiles& files, int threads);
  LoadedNet(const LoadedNet&) = delete;
  LoadedNet& operator=(const LoadedNet&) = delete;

  const NetFiles& files() const { return files_; }
  // The .param's layers with their params, for checking model.json's claims against the net.
  const ParamGraph& graph() const { return graph_; }
  ncnn::Extractor extractor() const { return net_->create_extractor(); }
  // One input (files().inputs[0]) -> one output (files().outputs[0]).
  ncnn::Mat run(const ncnn::Mat& in) const;
  // ex.input / ex.extract with errors naming the net and blob.
  void input(ncnn::Extractor& ex, const std::string& blob, const ncnn::Mat& mat) const;
  ncnn::Mat extract(ncnn::Extractor& ex, const std::string& blob, int type = 0) const;

 private:
  void load_weights_mapped(const MappedFile& bin);
  void load_weights_read();

  NetFiles files_;
  // The mapped .bin when files.map_weights: ncnn's Mats may point into it, so it outlives net_ (members
  // are destroyed in reverse order).
  std::unique_ptr<MappedFile> bin_map_;
  // Widens the bf16 / fp16 B of the net's Gemms while a mapped exact-fp32 load runs (weight_widening.hpp);
  // null otherwise. Declared before net_: its Gemm layers hold the pointer.
  std::unique_ptr<WeightWidener> widener_;
  std::unique_ptr<ncnn::Net> net_;
  ParamGraph graph_;
};

// A fresh 2-D Mat (w = cols, h = rows) holding a copy of rows*cols row-major floats.
ncnn::Mat mat_2d(const float* data, int rows, int cols);
// The rows of a 2-D float Mat (h rows of w) copied out row-major; checks dims and the expected width.
std::vector<float> mat_rows(const ncnn::Mat& m, int expected_cols, const std::string& what);

}  // namespace gsurg

// Token embeddings for the LLM. With tied embeddings (model.json "tie_word_embeddings") the rows are read
// from the one [vocab, hidden] matrix inside lm_head's .bin, at the offset and storage model.json
// "embedding_matrix" records (fp32/raw, or fp16/bf16 widened exactly as ncnn widens them at load, or
// block-quantized int4/int6/int8 codes dequantized per row with their block scales, as ncnn's Gemm reads
// the same bytes), through a memory map, so the matrix is never loaded twice; its tag and size are
// checked against the file first.
// Untied embeddings, or a storage the runtime cannot read directly, go through the `embed` net (int32 ids
// in a 1-D Mat, as ncnn's Embed reads them).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gsurg/mapped_file.hpp"
#include "gsurg/model_config.hpp"
#include "gsurg/nets.hpp"

namespace gsurg {

class Embeddings {
 public:
  Embeddings(const ModelConfig& cfg, int threads, bool allow_map = true);
  // Rows [ids.size(), hidden] row-major. Ids in skip (e.g. the image token) give zero rows (to be
  // overwritten); any other id outside the matrix is a gsurg::Error naming it.
  std::vector<float> rows(const std::vector<int>& ids, int skip_id = -1) const;
  // Throws gsurg::Error ("<what>token id N is outside the embedding table (R rows)") for an id no row has;
  // skip_id is let through (the placeholder the family fills).
  void check_ids(const std::vector<int>& ids, int skip_id = -1, const std::string& what = "") const;
  int hidden() const { return hidden_; }
  std::string source() const;  // for --verbose: where the rows come from
  const LoadedNet* net() const { return net_.get(); }  // the embed net when rows come from it

 private:
  void matrix_row(int id, float* out) const;
  void quantized_row(int id, float* out) const;
  void check_block_quant(const std::string& json_path) const;
  int hidden_ = 0;
  int vocab_ = 0;
  EmbeddingMatrix matrix_;
  int elem_bytes_ = 4;
  std::unique_ptr<MappedFile> file_;
  std::unique_ptr<LoadedNet> net_;
};

}  // namespace gsurg

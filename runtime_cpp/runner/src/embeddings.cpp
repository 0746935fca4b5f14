// Embedding rows from the tied matrix in lm_head's .bin (memory-mapped; float, or block-quantized codes
// dequantized per row) or from the embed net.
#include "gsurg/embeddings.hpp"

#include <cstring>

#include <mat.h>

#include "gsurg/error.hpp"

namespace gsurg {

namespace {

uint32_t expected_tag(const std::string& storage) {
  if (storage == "fp16") return 0x01306B47u;
  if (storage == "bf16") return 0x01348B83u;
  return 0u;  // fp32
}

}  // namespace

Embeddings::Embeddings(const ModelConfig& cfg, int threads, bool allow_map)
    : hidden_(cfg.hidden_size), vocab_(cfg.vocab_size) {
  const std::string& s = cfg.embedding.storage;
  const bool readable = s == "fp32" || s == "raw" || s == "fp16" || s == "bf16" || cfg.embedding.bits != 0;
  if (!cfg.tied || !readable) {
    if (cfg.tied && cfg.nets.count("embed") == 0)
      throw Error(cfg.json_path + ": embedding_matrix.storage \"" + s +
                  "\" cannot be read directly and there is no embed net");
    net_.reset(new LoadedNet(cfg.net("embed"), threads));
    return;
  }
  matrix_ = cfg.embedding;
  elem_bytes_ = (s == "fp16" || s == "bf16") ? 2 : 4;
  file_.reset(new MappedFile(matrix_.bin, allow_map));
  if (matrix_.bits != 0) {
    check_block_quant(cfg.json_path);
    return;
  }
  if (s != "raw") {
    if (matrix_.tag_offset + 4 != matrix_.offset)
      throw Error(cfg.json_path + ": embedding_matrix.tag_offset must be 4 bytes before its offset");
    if (matrix_.tag != expected_tag(s))
      throw Error(cfg.json_path + ": embedding_matrix.tag " + std::to_string(matrix_.tag) + " is not the "
          + s +
                  " tag " + std::to_string(expected_tag(s)));
    uint32_t tag = 0;
    file_->read(matrix_.tag_offset, 4, &tag);
    if (tag != matrix_.tag)
      throw Error(matrix_.bin + ": the weight tag at byte " + std::to_string(matrix_.tag_offset) + " is " +
                  std::to_string(tag) + ", not the " + s + " tag " + std::to_string(matrix_.tag) +
                  " of model.json embedding_matrix");
  }
  // rows * cols * elem_bytes may not fit 64 bits (a shape of [2^62, 64]): compare by division instead.
  const uint64_t size = file_->size();
  const uint64_t row_bytes = static_cast<uint64_t>(matrix_.cols) * static_cast<uint64_t>(elem_bytes_);
  const uint64_t room = matrix_.offset <= size ? size - matrix_.offset : 0;
  if (matrix_.offset > size || static_cast<uint64_t>(matrix_.rows) > room / row_bytes)
    throw Error(matrix_.bin + ": " + std::to_string(size) + " bytes, but model.json embedding_matrix (" +
                std::to_string(matrix_.rows) + "x" + std::to_string(matrix_.cols) + " " + s + " at byte " +
                std::to_string(matrix_.offset) + ") needs " + std::to_string(matrix_.rows) + " rows of " +
                std::to_string(row_bytes) + " bytes there; only " + std::to_string(room / row_bytes) +
                " fit");
}

// The packed rows and the scale table of a block-quantized matrix must lie inside the file, the table
// after the rows (as ncnn reads them: B, then the scales).
void Embeddings::check_block_quant(const std::string& json_path) const {
  const uint64_t size = file_->size();
  const uint64_t rows = static_cast<uint64_t>(matrix_.rows);
  const uint64_t row_bytes = static_cast<uint64_t>(matrix_.row_bytes);
  const uint64_t blocks = static_cast<uint64_t>((matrix_.cols + matrix_.block_size - 1) / matrix_.block_size);
  const uint64_t room = matrix_.offset <= size ? size - matrix_.offset : 0;
  if (matrix_.offset > size || rows > room / row_bytes)
    throw Error(matrix_.bin + ": " + std::to_string(size) + " bytes, but model.json embedding_matrix (" +
                std::to_string(matrix_.rows) + " rows of " + std::to_string(row_bytes) + " " +
                matrix_.storage + " bytes at byte " + std::to_string(matrix_.offset) +
                ") does not fit; only " + std::to_string(room / row_bytes) + " rows do");
  if (matrix_.scales_offset < matrix_.offset + rows * row_bytes)
    throw Error(json_path + ": embedding_matrix.block_quant.scales_offset " +
                std::to_string(matrix_.scales_offset) + " lies inside the packed rows (bytes " +
                std::to_string(matrix_.offset) + " to " + std::to_string(matrix_.offset + rows * row_bytes) +
                ")");
  const uint64_t table_room = matrix_.scales_offset <= size ? size - matrix_.scales_offset : 0;
  if (matrix_.scales_offset > size || rows > table_room / (blocks * 4))
    throw Error(matrix_.bin + ": " + std::to_string(size) + " bytes, but model.json embedding_matrix's " +
                std::to_string(matrix_.rows) + "x" + std::to_string(blocks) + " scale table at byte " +
                std::to_string(matrix_.scales_offset) + " does not fit");
}

// One row of a block-quantized matrix: code k of the row at bit k*bits (least significant bit first),
// sign-extended, times 1/scale of its block — what ncnn's Gemm computes with (src/layer/gemm.cpp).
void Embeddings::quantized_row(int id, float* out) const {
  const int cols = static_cast<int>(matrix_.cols);
  const int bits = matrix_.bits;
  const int blocks = (cols + matrix_.block_size - 1) / matrix_.block_size;
  std::vector<unsigned char> packed(static_cast<size_t>(matrix_.row_bytes) + 1, 0);  // +1: the 2-byte window
  file_->read(matrix_.offset + static_cast<uint64_t>(id) * static_cast<uint64_t>(matrix_.row_bytes),
              static_cast<size_t>(matrix_.row_bytes), packed.data());
  std::vector<float> scales(static_cast<size_t>(blocks));
  file_->read(matrix_.scales_offset + static_cast<uint64_t>(id) * static_cast<uint64_t>(blocks) * 4u,
              scales.size() * 4u, scales.data());
  const unsigned int mask = (1u << bits) - 1u;
  const int sign = 1 << (bits - 1);
  for (int k = 0; k < cols; ++k) {
    const int bit = k * bits;
    const unsigned int window = packed[static_cast<size_t>(bit / 8)] |
                                (static_cast<unsigned int>(packed[static_cast<size_t>(bit / 8) + 1]) << 8);
    const int code = static_cast<int>((window >> (bit % 8)) & mask);
    const float descale = 1.f / scales[static_cast<size_t>(k / matrix_.block_size)];
    out[k] = static_cast<float>((code ^ sign) - sign) * descale;
  }
}

std::string Embeddings::source() const {
  if (net_) return "embed net " + net_->files().bin;
  return matrix_.bin + (file_->mapped() ? " (memory-mapped)" : " (read by rows)");
}

void Embeddings::matrix_row(int id, float* out) const {
  if (matrix_.bits != 0) {
    quantized_row(id, out);
    return;
  }
  const size_t n = static_cast<size_t>(matrix_.cols);
  const uint64_t at = matrix_.offset + static_cast<uint64_t>(id) * n * elem_bytes_;
  if (elem_bytes_ == 4) {
    file_->read(at, n * 4, out);
    return;
  }
  std::vector<unsigned short> half(n);
  file_->read(at, n * 2, half.data());
  const bool bf16 = matrix_.storage == "bf16";
  for (size_t i = 0; i < n; ++i) out[i] = bf16 ? ncnn::bfloat16_to_float32(half[i])
      : ncnn::float16_to_float32(half[i]);
}

void Embeddings::check_ids(const std::vector<int>& ids, int skip_id, const std::string& what) const {
  const int64_t limit = net_ ? vocab_ : matrix_.rows;
  for (int id : ids) {
    if (id != skip_id && (id < 0 || id >= limit))
      throw Error(what + "token id " + std::to_string(id) + " is outside the embedding table ("
          + std::to_string(limit) + " rows)");
  }
}

std::vector<float> Embeddings::rows(const std::vector<int>& ids, int skip_id) const {
  const size_t h = static_cast<size_t>(hidden_);
  std::vector<float> out(ids.size() * h, 0.0f);
  check_ids(ids, skip_id);
  if (net_) {
    ncnn::Mat in(static_cast<int>(ids.size()), static_cast<size_t>(4u));
    int* p = static_cast<int*>(in.data);
    for (size_t i = 0; i < ids.size(); ++i) p[i] = ids[i] == skip_id ? 0 : ids[i];
    ncnn::Mat m = net_->run(in);
    if (m.dims == 1 && ids.size() == 1) m = m.reshape(m.w, 1);
    std::vector<float> got = mat_rows(m, hidden_, net_->files().param + " output");
    if (got.size() != out.size()) throw Error(net_->files().param
        + ": the embed net returned the wrong row count");
    return got;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == skip_id) continue;
    matrix_row(ids[i], &out[i * h]);
  }
  return out;
}

}  // namespace gsurg

// model.json of a folder `gsurg apply` wrote, the part every family shares, read into plain structs: the
// nets (files and interface blobs), the decoder's blob names and RoPE, the EOS ids, the tokenizer files and
// where the tied embedding matrix lies in lm_head's .bin. Nothing here is a constant of the model: every
// value comes from the file. load() checks format "gsurg-model" first, then that "family" names a
// registered family and "version" is the one it reads (the file's contract is
// schemas/model_json/<family>.v<version>.schema.json), makes that family (family_registry.hpp), and reads
// the keys, their types and values, and that every file it names exists, handing the family its own keys
// (Family::read_config); any problem is a gsurg::Error naming the file and key (or the missing file).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gsurg {

class Family;

// How the nets run (the runner's --precision; not from model.json): kFp32 exact fp32 (fp16/bf16 storage,
// packing and arithmetic off), kFp16 ncnn's fp16 storage, packed storage, arithmetic and packing layout
// where the CPU has them (ncnn skips the layers a conversion's calibration marked with 31=), kAuto ncnn's
// own defaults for the CPU. Block-quantized Gemms run their int kernels under all three.
enum class Precision { kFp32, kFp16, kAuto };

struct NetFiles {
  std::string name;   // the key in model.json "nets"
  std::string param;  // full paths (folder joined)
  std::string bin;
  std::vector<std::string> inputs, outputs;
  Precision precision = Precision::kFp32;  // set by the run, not read from model.json
  // Set by the run (the runner's --no-mmap clears it): load the .bin through a read-only memory map, so
  // ncnn references the weights in place instead of copying each into a fresh buffer first.
  bool map_weights = true;
  // Set by the run (the runner's --int4-activations int8): 4-bit Gemms quantize their input to 8 bits per
  // block and run gsurg's integer kernel (w4a8_kernel.hpp) instead of reproducing ncnn's float loop.
  bool quantize_int4_input = false;
};

struct DecoderSettings {
  std::string hidden, mask, cos, sin, output;
  std::vector<std::string> cache_inputs, cache_outputs;  // pairwise: cache_inputs[i] -> cache_outputs[i]
  float mask_value = -1e38f;
  double rope_theta = 0.0;
  int rope_head_dim = 0;
  bool rope_full_width = true;  // false: half-width [T, head_dim/2] tables
};

struct EmbeddingMatrix {  // model.json "embedding_matrix": the tied [rows, cols] matrix inside a .bin
  std::string bin;        // full path
  uint64_t offset = 0;    // first value
  uint64_t tag_offset = 0;
  uint32_t tag = 0;
  std::string storage;    // fp32, raw, fp16, bf16, int4/int6/int8 (others: the embed net is used)
  int64_t rows = 0, cols = 0;
  // int4/int6/int8 ("block_quant"): ncnn's weight-only block quantization of lm_head's B — each row is
  // row_bytes of packed signed codes (code k at bit k*bits, least significant bit first), then a
  // [rows, ceil(cols / block_size)] fp32 scale table at scales_offset; a value is code * (1 / scale).
  int bits = 0;           // 0: not quantized
  int block_size = 0;
  int64_t row_bytes = 0;
  uint64_t scales_offset = 0;
};

struct ModelConfig {
  std::string folder;
  std::string json_path;
  std::string family;  // model.json "family"
  std::map<std::string, NetFiles> nets;
  DecoderSettings decoder;
  int hidden_size = 0;
  int num_layers = 0;
  int vocab_size = 0;
  std::vector<int> eos_tokens;
  std::string tokenizer_json;     // full paths; both empty when model.json names no tokenizer (ids only)
  std::string tokenizer_config;
  bool tied = false;
  EmbeddingMatrix embedding;      // rows 0 (storage ""): no embedding_matrix entry, the embed net's rows
  int64_t max_positions = 0;      // 0: no limit known (model.json "max_positions", else the tokenizer's
                                  // model_max_length when it is a real number)

  // family: the family model.json names, made and given its keys.
  static ModelConfig load(const std::string& folder, std::unique_ptr<Family>& family);
  const NetFiles& net(const std::string& name) const;  // throws naming model.json when absent
  bool is_eos(int id) const;
  bool has_tokenizer() const { return !tokenizer_json.empty(); }
};

}  // namespace gsurg

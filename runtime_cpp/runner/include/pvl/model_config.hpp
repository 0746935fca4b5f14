// model.json of a folder `gsurg apply rules/penguin_vl.yaml` wrote, read into plain structs: the six nets
// (files and interface blobs), the vision RoPE settings, the decoder's blob names and RoPE, the special
// ids (image, EOS), the tokenizer files and where the tied embedding matrix lies in lm_head's .bin.
// Nothing here is a constant of the model: every value comes from the file. load() checks format
// "gsurg-model", family "penguin_vl" and version 2 first (the file's contract is
// schemas/model_json/penguin_vl.v2.schema.json), then the keys, their types and values, and that every file
// it names exists; any problem is a pvl::Error naming the file and key (or the missing file).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pvl {

struct NetFiles {
  std::string name;   // the key in model.json "nets"
  std::string param;  // full paths (folder joined)
  std::string bin;
  std::vector<std::string> inputs, outputs;
};

struct VisionSettings {
  std::string hidden, cos, sin, output;  // vision_encoder blobs
  int layers = 0;
  double rope_theta = 0.0;
  int rope_head_dim = 0;
  bool rope_full_width = true;  // "table_width": "full" (the only layout a 2-D table can have)
  bool rope_lowered = false;    // true: explicit Slice/BinaryOp graph (any ncnn); false: RotaryEmbed 0=0
  int patch_size = 0;
  int merge_size = 1;
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
  std::string storage;    // fp32, raw, fp16, bf16 (others: the embed net is used)
  int64_t rows = 0, cols = 0;
};

struct ModelConfig {
  std::string folder;
  std::string json_path;
  std::map<std::string, NetFiles> nets;
  VisionSettings vision;
  nlohmann::json image_processor;  // a preprocessor_config, handed to the image processor as is
  DecoderSettings decoder;
  int hidden_size = 0;
  int num_layers = 0;
  int vocab_size = 0;
  int image_token = -1;
  std::vector<int> eos_tokens;
  std::string tokenizer_json;     // full paths
  std::string tokenizer_config;
  bool tied = false;
  EmbeddingMatrix embedding;
  int64_t max_positions = 0;      // 0: no limit known (model.json "max_positions", else the tokenizer's
                                  // model_max_length when it is a real number)

  static ModelConfig load(const std::string& folder);
  const NetFiles& net(const std::string& name) const;  // throws naming model.json when absent
  bool is_eos(int id) const;
};

}  // namespace pvl

// A model family: what differs between the VLMs the runtime runs, behind one interface the model-agnostic
// core (model_config, nets, embeddings, decoder, sampler, generate, cli) calls. model.json's "family"
// chooses it (family_registry.hpp); the core reads the keys every family shares (the LLM half: nets embed /
// decoder / lm_head, decoder.*, tokens.eos, tokenizer.*, embedding_matrix, sizes) and hands the document to
// the family for the rest.
//
// Contract, in the order the core calls it:
//   - net_names / required_nets: the family's own entries of model.json "nets" (read and checked by the
//     core like its own; a required one missing is an error naming it); given the document, for a family
//     whose nets model.json lists (e.g. one merger net per tap of the vision tower);
//   - read_config: the family's keys, every problem a gsurg::Error naming the file and key (JsonDoc);
//   - decoder_inputs: decoder input blobs the family feeds besides hidden, mask, cos, sin and the caches
//     (e.g. DeepStack features, added to the hidden rows); the core checks they are inputs of nets.decoder
//     and feeds zeros [rows, hidden_size] for each one a step does not supply (every decode step, a
//     text-only prefill): an absent additive feature adds nothing, and ncnn's BinaryOp cannot take an
//     empty Mat;
//   - load_vision: loads and checks the vision nets, once, before the first image is preprocessed;
//   - image_preprocessor: the family's image preprocessing with its settings parsed (an error naming the
//     key comes before any image is read): a decoded image -> the patches the vision nets take (resize,
//     normalise, patch order);
//   - prompt_ids: the chat template and image placeholders, tokenized;
//   - check_prompt: the prompt ids against the images (placeholder count), before anything runs;
//   - placeholder_id: the id whose embedding rows fuse_images overwrites (-1: none);
//   - fuse_images: runs the vision nets, writes the features into the prompt's embedding rows and returns
//     the extra decoder inputs of the prefill;
//   - positions: the RoPE position counter of one prompt: cos/sin tables for any span of the sequence
//     (1-D, or e.g. interleaved multimodal RoPE over several images).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gsurg/image_input.hpp"
#include "gsurg/rope.hpp"

namespace gsurg {

class JsonDoc;
struct ModelConfig;
class Tokenizer;  // gsurg_tokenizer (GSURG_HAVE_TOKENIZER)
struct Image;     // gsurg_preprocess (GSURG_HAVE_PREPROCESS)

// A 2-D float input [rows, cols] of the decoder net, by blob name.
struct NetInput {
  std::string blob;
  int rows = 0, cols = 0;
  std::vector<float> data;  // rows x cols, row-major
};

// What one decoder step takes besides the hidden rows, the causal mask and the caches.
struct StepInputs {
  RopeTables rope;              // [rows, width] cos / sin for the step's positions
  std::vector<NetInput> extra;  // some of the family's decoder_inputs(); absent ones are fed zeros
};

using ImagePreprocessor = std::function<PatchInput(const Image&)>;

// The RoPE positions of one sequence (prompt, then generated tokens).
class Positions {
 public:
  virtual ~Positions();
  // Tables for the sequence's tokens start..start+rows-1 (token index, not position id).
  virtual RopeTables tables(int start, int rows) const = 0;
};

class Family {
 public:
  virtual ~Family();
  virtual std::string name() const = 0;

  // ---- model.json
  virtual std::vector<std::string> net_names(const JsonDoc& doc) const = 0;
  virtual std::vector<std::string> required_nets(const JsonDoc& doc) const = 0;
  virtual void read_config(const JsonDoc& doc, const ModelConfig& cfg) = 0;
  virtual std::vector<std::string> decoder_inputs() const { return {}; }

  // ---- images
  virtual void load_vision(const ModelConfig& cfg, int threads) = 0;
  virtual ImagePreprocessor image_preprocessor() const = 0;

  // ---- prompt
  virtual std::vector<int> prompt_ids(const Tokenizer& tok, const std::string& user_text,
                                      const std::vector<PatchInput>& images) const = 0;
  virtual void check_prompt(const std::vector<int>& ids, const std::vector<PatchInput>& images) const = 0;
  virtual int placeholder_id() const = 0;

  // ---- inference
  virtual std::vector<NetInput> fuse_images(const ModelConfig& cfg, const std::vector<int>& ids,
                                            const std::vector<PatchInput>& images,
                                            std::vector<float>& embeds) const = 0;
  virtual std::unique_ptr<Positions> positions(const ModelConfig& cfg, const std::vector<int>& ids,
                                               const std::vector<PatchInput>& images) const = 0;
};

// The default counter: 1-D positions 0, 1, 2, ... with the decoder's model.json rope settings.
class TextPositions : public Positions {
 public:
  TextPositions(int head_dim, double theta, bool full_width)
      : head_dim_(head_dim), theta_(theta), full_width_(full_width) {}
  RopeTables tables(int start, int rows) const override;

 private:
  int head_dim_;
  double theta_;
  bool full_width_;
};

// Number of ids equal to id.
int count_id(const std::vector<int>& ids, int id);

}  // namespace gsurg

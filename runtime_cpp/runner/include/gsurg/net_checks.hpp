// model.json's claims checked against the loaded nets themselves, before anything runs: a width or count
// that disagrees with the weights would otherwise feed ncnn a tensor of the wrong shape (reading past its
// weights). Each check compares one claim with what the net's params fix (gsurg/param_graph.hpp) and fails
// with one gsurg::Error naming the model.json key, the value it claims and what the net has, e.g.
//   model.json: entry "vision.patch_size" is 28 (3x28x28 = 2352 values per patch), but
//   nets.vision_embed_patch takes 588 (vision_embed_patch.ncnn.param: Gemm "linear0" K)
// Where the graph does not fix a width (only shape-agnostic layers touch the blob) there is nothing to
// compare and the claim passes.
//
// - check_llm_nets (the core's nets): hidden_size against the decoder's input and output and lm_head's input;
//   vocab_size against lm_head's output (and the embed net's table rows when it is used);
//   embedding_matrix.shape against lm_head's weight; decoder.rope.head_dim against the width the
//   decoder's RoPE tables rotate; num_layers against its SDPA layers; every Input blob fed (the core's
//   and the family's extra decoder inputs).
// - the building blocks a family checks its own nets with (e.g. a family's vision-net check, which makes
//   the example above).
#pragma once

#include <string>
#include <vector>

#include "gsurg/model_config.hpp"
#include "gsurg/nets.hpp"

namespace gsurg {

// embed: the embed net when the runtime reads rows through it, else nullptr; extra_inputs: the family's
// decoder inputs (Family::decoder_inputs).
void check_llm_nets(const ModelConfig& cfg, const LoadedNet& decoder, const LoadedNet& lm_head,
                    const LoadedNet* embed, const std::vector<std::string>& extra_inputs);

// "nets.<name>" of a net, as errors name it.
std::string net_ref(const LoadedNet& net);
// A model.json value against a width the net fixes (nothing to compare when it fixes none); the net must
// have `expected` (the value itself when -1); what says what the net has, % for the number ("takes %").
void check_claim(const ModelConfig& cfg, const std::string& key, long long value, const std::string& meaning,
                 const LoadedNet& net, const Width& has, std::string what, long long expected = -1);
// The width one net produces against the width the next one takes.
void check_chain(const LoadedNet& from, const std::string& out, const LoadedNet& to, const std::string& in);
// Every Input blob of the net is one of blobs (the ones the runtime feeds).
void check_fed(const LoadedNet& net, const std::vector<std::string>& blobs);
// model.json's layer count (key) against the net's SDPA layers.
void check_layer_count(const ModelConfig& cfg, const std::string& key, int value, const LoadedNet& net);

}  // namespace gsurg

// model.json's claims checked against the loaded nets themselves, before anything runs: a width or count
// that disagrees with the weights would otherwise feed ncnn a tensor of the wrong shape (reading past its
// weights). Each check compares one claim with what the net's params fix (pvl/param_graph.hpp) and fails
// with one pvl::Error naming the model.json key, the value it claims and what the net has, e.g.
//   model.json: entry "vision.patch_size" is 28 (3x28x28 = 2352 values per patch), but
//   nets.vision_embed_patch takes 588 (vision_embed_patch.ncnn.param: Gemm "linear0" K)
// Where the graph does not fix a width (only shape-agnostic layers touch the blob) there is nothing to
// compare and the claim passes.
//
// - check_vision_nets: vision.patch_size against the patch embedding's input width; the patch embedding's
//   output, the encoder's input and output and the projector's input widths along the chain;
//   hidden_size against the projector's output; vision.rope.head_dim against the width the encoder's
//   RoPE tables rotate; vision.layers against the encoder's SDPA layers; every Input blob fed.
// - check_llm_nets: hidden_size against the decoder's input and output and lm_head's input;
//   vocab_size against lm_head's output (and the embed net's table rows when it is used);
//   embedding_matrix.shape against lm_head's weight; decoder.rope.head_dim against the width the
//   decoder's RoPE tables rotate; num_layers against its SDPA layers; every Input blob fed.
#pragma once

#include "pvl/model_config.hpp"
#include "pvl/nets.hpp"

namespace pvl {

void check_vision_nets(const ModelConfig& cfg, const LoadedNet& patch, const LoadedNet& encoder,
                       const LoadedNet& projector);
// embed: the embed net when the runtime reads rows through it, else nullptr.
void check_llm_nets(const ModelConfig& cfg, const LoadedNet& decoder, const LoadedNet& lm_head,
                    const LoadedNet* embed);

}  // namespace pvl

// ncnn's Gemm layer as the runner loads it where a net has block-quantized weights: LowBitGemm runs each
// 4- or 6-bit Gemm through lowbit_kernel.hpp (bit-identical to ncnn's own loop, many times faster), each
// 8-bit one, on a CPU with AVX-512 VNNI or AVX2 + FMA and in a net with exact fp32 options, through
// int8_kernel.hpp, and
// hands every other Gemm, unchanged, to ncnn's builtin layer for this CPU.
//
// Contract:
//   - LowBitNet is an ncnn::Net whose every "Gemm" is a LowBitGemm (through ncnn's overwrite-builtin hook,
//     without its registry, which logs each registration to stderr); every other type is ncnn's.
//   - LowBitGemm::load_param first lets ncnn's builtin Gemm read and validate the params (its errors and
//     flags are ncnn's). It takes the layer over only for B constant, transB=1, transA=0, no output
//     transpose / N1M / elempack, 4 or 6 bits with K a multiple of the kernel's chunk
//     (lowbit::packable), and only where the kernel reproduces this ncnn's loop (ncnn_loop_rounding);
//     then it reads the .bin exactly as ncnn's Gemm reads it (codes, C, block scales,
//     input scales) and packs each part as it is read, keeping no reference to the codes. It takes an
//     8-bit Gemm of that shape with no C (any alpha) where int8k::available(), int8k::packable, the net's
//     options are exact fp32 (LowBitNet passes them) and int8_descale() found the form that reproduces this
//     ncnn. Otherwise every call goes to the builtin layer and the flags ncnn reads are the builtin's.
//   - With quantize_int4_input (the runner's --int4-activations int8; off by default), a 4-bit Gemm of the
//     shape above with K a whole number of blocks runs through w4a8_kernel.hpp instead, where a SIMD
//     instance of it runs on this CPU (w4a8::accelerated()): not ncnn's arithmetic, the input rounded to
//     8 bits per block, with C and alpha applied after the product. 6-bit Gemms and every other case stay
//     as above.
//   - With a WeightWidener (LowBitNet's, given where the runner maps an exact-fp32 net's .bin), a Gemm the
//     builtin layer runs, with B constant and A not, arms it just before the builtin's load_model, so a B
//     stored bf16 or fp16 is widened by the runner (weight_widening.hpp); only in a net with exact fp32
//     options in lightmode, the options builtin_gemm_drops_constant_b() proved.
//   - packed_gemm_layers(), w4a8_gemm_layers() and int8_gemm_layers() count the 4/6-bit, the 4-bit w4a8
//     and the 8-bit layers taken over in this process, so --verbose can say the kernels ran.
//   - has_block_quantized_gemm(param path) says whether a .param has a 4-, 6- or 8-bit block-quantized
//     Gemm (a text scan; false when the file cannot be read, leaving the error to ncnn's own load).
#pragma once

#include <string>
#include <vector>

#include <layer.h>
#include <net.h>

#include "gsurg/int8_kernel.hpp"
#include "gsurg/lowbit_kernel.hpp"
#include "gsurg/w4a8_kernel.hpp"
#include "gsurg/weight_widening.hpp"

namespace gsurg {

class LowBitGemm : public ncnn::Layer {
 public:
  // exact_fp32: the net runs without packing, fp16 or bf16 (the only options the int8 kernel takes);
  // threads: the net's, for packing the 8-bit weights as they load; quantize_int4_input: 4-bit Gemms
  // through the w4a8 kernel where it can take them.
  explicit LowBitGemm(lowbit::Kernel kernel = lowbit::Kernel::kBest, bool exact_fp32 = true, int threads = 1,
                      bool quantize_int4_input = false);
  // The widener to arm for B (see the contract above); null: none. Not owned.
  void widen_with(WeightWidener* widener) { widener_ = widener; }
  ~LowBitGemm() override;
  LowBitGemm(const LowBitGemm&) = delete;
  LowBitGemm& operator=(const LowBitGemm&) = delete;

  int load_param(const ncnn::ParamDict& pd) override;
  int load_model(const ncnn::ModelBin& mb) override;
  int create_pipeline(const ncnn::Option& opt) override;
  int destroy_pipeline(const ncnn::Option& opt) override;
  int forward(const std::vector<ncnn::Mat>& bottom_blobs, std::vector<ncnn::Mat>& top_blobs,
              const ncnn::Option& opt) const override;
  int forward(const ncnn::Mat& bottom_blob, ncnn::Mat& top_blob, const ncnn::Option& opt) const override;

  // Whether this layer runs one of gsurg's kernels (false: ncnn's builtin Gemm runs it).
  bool packed() const { return builtin_ == nullptr; }
  // Whether that kernel is the w4a8 one.
  bool w4a8() const { return use_w4a8_; }

 private:
  void take_flags(const ncnn::Layer& from);

  lowbit::Kernel kernel_;
  bool exact_fp32_;
  int threads_;
  bool quantize_int4_input_;
  bool use_w4a8_ = false;
  lowbit::Rounding rounding_ = lowbit::Rounding::kSeparate;
  int8k::Descale descale_ = int8k::Descale::kReciprocal;
  ncnn::Layer* builtin_;  // owned; null once a kernel takes the layer over
  WeightWidener* widener_ = nullptr;
  bool widen_b_ = false;  // B constant, A not: B is the first weight the builtin reads
  // The taken-over layer's params (ncnn's Gemm param ids in brackets) and weights.
  float alpha_ = 1.f, beta_ = 1.f;  // [0] [1]
  int constant_m_ = 0, n_ = 0, k_ = 0;  // [7] [8] [9]
  int constant_c_ = 0, broadcast_c_ = 0;  // [6] [10]
  int bits_ = 0, block_ = 0;  // [18] = bits * 100 + input-scale format * 10 + block code
  int constant_tile_m_ = 0;   // [20]: ncnn's constant_TILE_M (its row tiles, which the 8-bit kernel follows)
  bool has_input_scale_ = false;
  ncnn::Mat c_;  // C as read
  lowbit::PackedWeights weights_;     // 4 and 6 bits
  int8k::Int8Weights int8_weights_;   // 8 bits
  w4a8::Weights w4a8_weights_;        // 4 bits, quantize_int4_input
};

class LowBitNet : public ncnn::Net {
 public:
  // quantize_int4_input: every LowBitGemm it makes is built with it (the runner's --int4-activations int8).
  // widener: armed by the Gemms it makes where the net's options are exact fp32 in lightmode (not owned).
  explicit LowBitNet(bool quantize_int4_input = false, WeightWidener* widener = nullptr)
      : quantize_int4_input_(quantize_int4_input), widener_(widener) {}

 protected:
  ncnn::Layer* create_overwrite_builtin_layer(int typeindex) override;
#if NCNN_STRING
  using ncnn::Net::create_overwrite_builtin_layer;
#endif

 private:
  bool quantize_int4_input_;
  WeightWidener* widener_;
};

bool has_block_quantized_gemm(const std::string& param_path);

// How this process's ncnn rounds its 4/6-bit loop, measured once (the first call) by running its builtin
// Gemm and the kernel under each rounding on the same random case of each input-scale format: 0 separate,
// 1 fused, -1 neither reproduces it bit for bit (then no Gemm is taken over). ncnn's -ffast-math build
// leaves the choice to the compiler and the target flags it was built with (lowbit_kernel.hpp).
int ncnn_loop_rounding();

// The instance the runtime's Gemms run (the layer factory builds LowBitGemm with it): kBest when the widest
// instance this CPU has agrees with the builtin Gemm on the same probe cases as the 8-lane one (measured
// once), else kEightLanes. The widest (AVX-512) instance is only taken where it is proven in the process
// that runs it; a LowBitGemm built for kBest directly (the checks) runs the widest unconditionally.
lowbit::Kernel proven_best_kernel();

// The name of the instance above under the measured rounding ("avx512+fma", "avx2", "neon", ...).
const char* lowbit_kernel_in_use();

// How many Gemm layers this process has loaded through the kernel so far (for --verbose).
int packed_gemm_layers();

// How the 8-bit kernel computes the descale of an input block so that a decode step equals this process's
// ncnn bit for bit, measured once (the first call) against the builtin Gemm: 1 absmax * (1 / 127) (what
// GCC makes of ncnn's absmax / 127 under -ffast-math), 0 absmax / 127, -1 neither, or no kernel on this CPU
// (then no 8-bit Gemm is taken over).
int int8_descale();

// How many 4-bit Gemm layers this process has loaded through the w4a8 kernel so far (for --verbose).
int w4a8_gemm_layers();

// How many 8-bit Gemm layers this process has loaded through the int8 kernel so far (for --verbose).
int int8_gemm_layers();

}  // namespace gsurg

// The probes LowBitGemm takes its kernels on (lowbit_gemm.hpp): each runs ncnn's builtin Gemm and a kernel
// on the same random case once per process and says whether, and in which form, the kernel reproduces
// this ncnn bit for bit (ncnn_loop_rounding, proven_best_kernel, int8_descale).
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include <layer.h>
#include <layer_type.h>
#include <mat.h>
#include <modelbin.h>
#include <option.h>
#include <paramdict.h>

#include "gsurg/lowbit_gemm.hpp"

namespace gsurg {

namespace {

// One thread, no packing, no fp16 or bf16: the options under which the probes compare outputs bit for bit.
ncnn::Option exact_fp32_option() {
  ncnn::Option opt;
  opt.num_threads = 1;
  opt.use_packing_layout = false;
  opt.use_fp16_storage = opt.use_fp16_packed = opt.use_fp16_arithmetic = false;
  opt.use_bf16_storage = opt.use_bf16_packed = false;
  opt.use_vulkan_compute = false;
  return opt;
}

// Whether ncnn's builtin Gemm and the kernel instance `kernel` under `rounding` agree bit for bit on one
// random 4-bit case (K 256, N 40: five column groups, an odd count; M 5: a four-row tile and a one-row
// one; block 32, input-scale format 0 or 1, A over twelve octaves so that the two roundings part); false
// too when ncnn refuses the case.
bool agrees(int format, lowbit::Rounding rounding, lowbit::Kernel kernel) {
  constexpr int K = 256, N = 40, M = 5, kBlock = 32, kBits = 4;
  std::mt19937 rng(20261203u + static_cast<unsigned>(format));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> unit(-1.f, 1.f), positive(1.f, 90.f);
  std::uniform_int_distribution<int> octave(-6, 6);
  ncnn::Mat codes(K * kBits / 8 * N, static_cast<size_t>(1u));
  for (int i = 0; i < K * kBits / 8 * N; ++i) static_cast<unsigned char*>(codes.data)[i] =
      static_cast<unsigned char>(byte(rng));
  ncnn::Mat scales(K / kBlock * N), input_scales(K), a(K, M);
  for (int i = 0; i < K / kBlock * N; ++i) scales[i] = positive(rng);
  for (int i = 0; i < K; ++i) input_scales[i] = positive(rng) / 30.f;
  for (int i = 0; i < K * M; ++i) a[i] = std::ldexp(unit(rng), octave(rng));

  ncnn::ParamDict pd;
  pd.set(3, 1);  // transB
  pd.set(5, 1);  // constant B
  pd.set(7, M);
  pd.set(8, N);
  pd.set(9, K);
  pd.set(18, kBits * 100 + format * 10);  // block 32
  const ncnn::Option opt = exact_fp32_option();
  std::unique_ptr<ncnn::Layer> builtin(ncnn::create_layer_cpu(ncnn::LayerType::Gemm));
  const ncnn::Mat weights[3] = {codes, scales, input_scales};
  ncnn::ModelBinFromMatArray mb(weights);
  std::vector<ncnn::Mat> bottoms(1, a), tops(1);
  if (!builtin || builtin->load_param(pd) != 0 || builtin->load_model(mb) != 0 ||
      builtin->create_pipeline(opt) != 0 || builtin->forward(bottoms, tops, opt) != 0 || tops[0].w != N ||
      tops[0].h != M)
    return false;

  lowbit::PackedWeights w = lowbit::pack_codes(kBits, kBlock, K, N, static_cast<const unsigned char*>(codes.data));
  lowbit::attach_scales(w, scales, format == 1 ? static_cast<const float*>(input_scales) : nullptr);
  std::vector<float> out(static_cast<size_t>(M) * N);
  lowbit::gemm(w, a, K, M, lowbit::Bias(), 1.f, out.data(), N, 1, rounding, kernel);
  builtin->destroy_pipeline(opt);
  return std::memcmp(out.data(), tops[0].data, out.size() * sizeof(float)) == 0;
}

// 0: separate, 1: fused, -1: neither reproduces this ncnn's loop (LowBitGemm then takes nothing over).
// Measured with the 8-lane instance, the one every build has.
int measure_rounding() {
  for (const lowbit::Rounding r : {lowbit::Rounding::kSeparate, lowbit::Rounding::kFused})
    if (agrees(0, r, lowbit::Kernel::kEightLanes) && agrees(1, r, lowbit::Kernel::kEightLanes))
      return r == lowbit::Rounding::kFused ? 1 : 0;
  return -1;
}

lowbit::Rounding measured_rounding() {
  return ncnn_loop_rounding() == 1 ? lowbit::Rounding::kFused : lowbit::Rounding::kSeparate;
}

// The instance kBest stands for: the widest where it agrees with ncnn as the 8-lane one does, else the
// 8-lane one (a wider instance this machine runs is then not trusted with any Gemm).
lowbit::Kernel measure_best_kernel() {
  if (ncnn_loop_rounding() < 0) return lowbit::Kernel::kEightLanes;
  const lowbit::Rounding r = measured_rounding();
  return agrees(0, r, lowbit::Kernel::kBest) && agrees(1, r, lowbit::Kernel::kBest) ? lowbit::Kernel::kBest
                                                                                      : lowbit::Kernel::kEightLanes;
}

// Whether ncnn's builtin 8-bit Gemm and the int8 kernel under `descale` agree bit for bit on one random
// decode-step case (M 1, K 256, N 48, block 64, input-scale format 0 or 1); false too when ncnn refuses it.
bool int8_agrees(int format, int8k::Descale descale) {
  constexpr int K = 256, N = 48, kBlock = 64;
  std::mt19937 rng(20261204u + static_cast<unsigned>(format));
  std::uniform_int_distribution<int> code(-127, 127);
  std::uniform_real_distribution<float> unit(-1.f, 1.f), positive(1.f, 90.f);
  std::uniform_int_distribution<int> octave(-6, 6);
  ncnn::Mat codes(K * N, static_cast<size_t>(1u));
  for (int i = 0; i < K * N; ++i)
    static_cast<signed char*>(codes.data)[i] = static_cast<signed char>(code(rng));
  ncnn::Mat scales(K / kBlock * N), input_scales(K), a(K, 1);
  for (int i = 0; i < K / kBlock * N; ++i) scales[i] = positive(rng);
  for (int i = 0; i < K; ++i) input_scales[i] = positive(rng) / 30.f;
  for (int i = 0; i < K; ++i) a[i] = std::ldexp(unit(rng), octave(rng));

  ncnn::ParamDict pd;
  pd.set(3, 1);  // transB
  pd.set(5, 1);  // constant B
  pd.set(7, 1);
  pd.set(8, N);
  pd.set(9, K);
  pd.set(18, 800 + format * 10 + 1);  // block 64
  std::unique_ptr<ncnn::Layer> builtin(ncnn::create_layer_cpu(ncnn::LayerType::Gemm));
  ncnn::Mat weights[3] = {codes, scales, input_scales};
  ncnn::ModelBinFromMatArray mb(weights);
  const ncnn::Option opt = exact_fp32_option();
  std::vector<ncnn::Mat> bottoms(1, a), tops(1);
  if (!builtin || builtin->load_param(pd) != 0 || builtin->load_model(mb) != 0 ||
      builtin->create_pipeline(opt) != 0 || builtin->forward(bottoms, tops, opt) != 0 || tops[0].w != N ||
      tops[0].h != 1)
    return false;
  int8k::Int8Weights w = int8k::pack_codes(kBlock, K, N, static_cast<const signed char*>(codes.data));
  int8k::attach_scales(w, scales, format == 1 ? static_cast<const float*>(input_scales) : nullptr);
  std::vector<float> out(N);
  int8k::gemm(w, a, K, 1, 1.f, out.data(), N, 1, descale);
  builtin->destroy_pipeline(opt);
  return std::memcmp(out.data(), tops[0].data, out.size() * sizeof(float)) == 0;
}

int measure_int8_descale() {
  if (!int8k::available()) return -1;
  for (const int8k::Descale d : {int8k::Descale::kReciprocal, int8k::Descale::kDivide})
    if (int8_agrees(0, d) && int8_agrees(1, d)) return d == int8k::Descale::kReciprocal ? 1 : 0;
  return -1;
}

}  // namespace

int int8_descale() {
  static const int measured = measure_int8_descale();
  return measured;
}

int ncnn_loop_rounding() {
  static const int measured = measure_rounding();
  return measured;
}

lowbit::Kernel proven_best_kernel() {
  static const lowbit::Kernel measured = measure_best_kernel();
  return measured;
}

const char* lowbit_kernel_in_use() {
  return lowbit::kernel_name(measured_rounding(), proven_best_kernel());
}

}  // namespace gsurg

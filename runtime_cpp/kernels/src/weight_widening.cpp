// WeightWidener and the widening loops (weight_widening.hpp).
#include "gsurg/weight_widening.hpp"

#include <atomic>
#include <cmath>
#include <cstring>
#include <new>
#include <random>
#include <vector>

#include <layer.h>
#include <layer_type.h>
#include <mat.h>
#include <modelbin.h>
#include <option.h>
#include <paramdict.h>

namespace gsurg {

namespace {

std::atomic<int> g_widened{0};

inline float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// IEEE half to single: every half value is a single value, so this is exact.
inline uint32_t half_to_single_bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return sign | 0x7f800000u | (mantissa << 13);  // infinity, NaN (payload kept)
  if (exponent != 0) return sign | ((exponent + 112u) << 23) | (mantissa << 13);
  if (mantissa == 0) return sign;  // signed zero
  // subnormal half: normalise; the value mantissa * 2^-24 is a normal single
  uint32_t e = 113;  // 127 - 15 + 1
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --e;
  }
  return sign | (e << 23) | ((mantissa & 0x3ffu) << 13);
}

}  // namespace

void widen_bf16(const uint16_t* src, size_t n, float* dst, int threads) {
  const long long count = static_cast<long long>(n);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (long long i = 0; i < count; ++i) dst[i] = from_bits(static_cast<uint32_t>(src[i]) << 16);
}

void widen_fp16(const uint16_t* src, size_t n, float* dst, int threads) {
  const long long count = static_cast<long long>(n);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (long long i = 0; i < count; ++i) dst[i] = from_bits(half_to_single_bits(src[i]));
}

bool WeightWidener::take_tag(uint32_t tag) {
  const bool take = armed_ && (tag == kBf16Tag || tag == kFp16Tag);
  armed_ = false;
  pending_tag_ = take ? tag : 0;
  return take;
}

const float* WeightWidener::widen(const unsigned char* src, size_t count) {
  const uint32_t tag = pending_tag_;
  pending_tag_ = 0;
  if (count > capacity_) {
    arena_.reset();
    capacity_ = 0;
    arena_.reset(new (std::nothrow) float[count]);
    if (!arena_) return nullptr;
    capacity_ = count;
  }
  // The stored values are 2-byte aligned at best (a tag and 4-byte padding before them): read them as bytes.
  std::vector<uint16_t> aligned;
  const uint16_t* values = reinterpret_cast<const uint16_t*>(src);
  if (reinterpret_cast<uintptr_t>(src) % alignof(uint16_t) != 0) {
    aligned.resize(count);
    std::memcpy(aligned.data(), src, count * sizeof(uint16_t));
    values = aligned.data();
  }
  if (tag == kBf16Tag)
    widen_bf16(values, count, arena_.get(), threads_);
  else
    widen_fp16(values, count, arena_.get(), threads_);
  ++g_widened;
  return arena_.get();
}

void WeightWidener::release() {
  arena_.reset();
  capacity_ = 0;
  pending_tag_ = 0;
  armed_ = false;
}

int widened_weights() { return g_widened.load(); }

bool builtin_gemm_drops_constant_b() {
  static const bool drops = [] {
    constexpr int kM = 5, kN = 24, kK = 40;
    ncnn::Option opt;
    opt.lightmode = true;
    opt.num_threads = 1;
    opt.use_vulkan_compute = false;
    opt.use_packing_layout = false;
    opt.use_fp16_storage = false;
    opt.use_fp16_packed = false;
    opt.use_fp16_arithmetic = false;
    opt.use_bf16_storage = false;
    opt.use_bf16_packed = false;

    std::mt19937 rng(20261020u);
    std::uniform_real_distribution<float> value(-1.f, 1.f);
    std::vector<float> b(static_cast<size_t>(kN) * kK);
    for (float& x : b) x = value(rng);
    ncnn::Mat a(kK, kM);
    for (int i = 0; i < kM * kK; ++i) static_cast<float*>(a.data)[i] = value(rng);

    std::unique_ptr<ncnn::Layer> gemm(ncnn::create_layer_cpu(ncnn::LayerType::Gemm));
    if (!gemm) return false;
    ncnn::ParamDict pd;
    pd.set(2, 0);    // transA
    pd.set(3, 1);    // transB: B stored [N, K], as the conversions store it
    pd.set(4, 0);    // constantA
    pd.set(5, 1);    // constantB
    pd.set(6, 0);    // constantC
    pd.set(8, kN);   // constantN
    pd.set(9, kK);   // constantK
    pd.set(10, -1);  // no C
    if (gemm->load_param(pd) != 0) return false;
    const ncnn::Mat weights[1] = {ncnn::Mat(kK * kN, b.data())};  // external: B stays in `b`
    if (gemm->load_model(ncnn::ModelBinFromMatArray(weights)) != 0) return false;
    if (gemm->create_pipeline(opt) != 0) return false;

    auto run = [&](ncnn::Mat& out) {
      std::vector<ncnn::Mat> bottoms(1, a), tops(1);
      if (gemm->forward(bottoms, tops, opt) != 0 || tops[0].dims != 2 || tops[0].w != kN || tops[0].h != kM)
        return false;
      out = tops[0].clone();
      return true;
    };
    ncnn::Mat before, after;
    bool same = run(before);
    for (float& x : b) x = std::nanf("");
    same = same && run(after);
    if (same) {
      const float* p = before;
      for (int i = 0; i < kM * kN && same; ++i) same = std::isfinite(p[i]);
      same = same && std::memcmp(before.data, after.data, sizeof(float) * kM * kN) == 0;
    }
    gemm->destroy_pipeline(opt);
    return same;
  }();
  return drops;
}

}  // namespace gsurg

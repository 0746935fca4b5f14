// weight_widening_check: the runner's own widening of 2-byte Gemm weights (runner/include/gsurg/
// weight_widening.hpp) against ncnn's.
//   1. widen_bf16 / widen_fp16 give ncnn's bfloat16_to_float32 / float16_to_float32 for every one of the
//      65,536 values, bit for bit (NaN for NaN), on one thread and on two.
//   2. builtin_gemm_drops_constant_b() holds for this ncnn (else the runner never widens: a regression here
//      means the loads fall back to ncnn's path and lose the gain, silently).
//   3. A net of five Gemms — B stored bf16, fp16 (with a bf16 bias C, which ncnn itself widens), fp32, a
//      bf16 B larger than the arena so far (it grows), and a bf16 B after a constant A (not armed) — loaded
//      mapped (the runner widens) and with map_weights off (ncnn widens), and the same values stored fp32:
//      the three outputs are bit-identical, and the runner widened exactly the three armed weights.
//   4. The same .bin cut inside the last armed bf16 payload: the mapped load throws gsurg::Error naming the .bin.
// Exit 0 when every check holds, 1 otherwise.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <mat.h>

#include "gsurg/error.hpp"
#include "gsurg/nets.hpp"
#include "gsurg/weight_widening.hpp"

namespace {

int g_failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++g_failures;
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

bool same_value(float mine, float ncnn_value) {
  if (std::isnan(ncnn_value)) return std::isnan(mine);
  return bits_of(mine) == bits_of(ncnn_value);
}

void check_conversions() {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (int threads : {1, 2}) {
    std::vector<float> bf(all.size()), hf(all.size());
    gsurg::widen_bf16(all.data(), all.size(), bf.data(), threads);
    gsurg::widen_fp16(all.data(), all.size(), hf.data(), threads);
    int bf_bad = 0, hf_bad = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      bf_bad += !same_value(bf[i], ncnn::bfloat16_to_float32(all[i]));
      hf_bad += !same_value(hf[i], ncnn::float16_to_float32(all[i]));
    }
    expect(bf_bad == 0, "widen_bf16 equals ncnn::bfloat16_to_float32 on all 65536 values, " +
                            std::to_string(threads) + " thread(s) (" + std::to_string(bf_bad) + " differ)");
    expect(hf_bad == 0, "widen_fp16 equals ncnn::float16_to_float32 on all 65536 values, " +
                            std::to_string(threads) + " thread(s) (" + std::to_string(hf_bad) + " differ)");
  }
}

// --- a small net of Gemms, written as .param + .bin ---------------------------------------------------------

enum class Store { kFp32, kBf16, kFp16 };

struct BinWriter {
  std::vector<unsigned char> bytes;
  void u32(uint32_t v) {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(&v);
    bytes.insert(bytes.end(), p, p + 4);
  }
  // A type-0 weight: tag, then the values in the storage asked for, padded to 4 bytes.
  void tagged(const std::vector<float>& values, Store store) {
    if (store == Store::kFp32) {
      u32(0);
      for (float v : values) u32(bits_of(v));
      return;
    }
    u32(store == Store::kBf16 ? gsurg::WeightWidener::kBf16Tag : gsurg::WeightWidener::kFp16Tag);
    for (float v : values) {
      const uint16_t h = store == Store::kBf16 ? static_cast<uint16_t>(bits_of(v) >> 16) : ncnn::float32_to_float16(v);
      const unsigned char* p = reinterpret_cast<const unsigned char*>(&h);
      bytes.insert(bytes.end(), p, p + 2);
    }
    while (bytes.size() % 4) bytes.push_back(0);
  }
};

// Values exactly representable in the storage (so that the fp32 .bin holds the same numbers).
std::vector<float> random_values(size_t n, Store store, std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-0.5f, 0.5f);
  std::vector<float> out(n);
  for (float& v : out) {
    v = value(rng);
    if (store == Store::kBf16) v = ncnn::bfloat16_to_float32(static_cast<uint16_t>(bits_of(v) >> 16));
    if (store == Store::kFp16) v = ncnn::float16_to_float32(ncnn::float32_to_float16(v));
  }
  return out;
}

struct TestNet {
  std::string param;
  std::vector<unsigned char> bin_as_stored, bin_fp32;
  size_t last_payload_start = 0;  // in bin_as_stored: the last armed bf16 payload
};

// in [M,K0] -> g0: B bf16 [K1,K0] -> g1: B fp16 [K2,K1] + C bf16 [K2] -> g2: B fp32 [K3,K2] -> g3: B bf16
// [K4,K3] (the largest: the arena grows) -> g4: a constant A bf16 [M4,K4] times g3's output taken as B
// (transB=1): A is read first and never armed, so ncnn widens it. The output is [M4, M].
TestNet make_net() {
  std::mt19937 rng(7u);
  const int m = 3, k0 = 16, k1 = 40, k2 = 24, k3 = 32, k4 = 200, m4 = 6;
  BinWriter stored, fp32;
  size_t last_payload = 0;
  auto weight = [&](size_t n, Store store, bool armed_bf16) {
    const std::vector<float> v = random_values(n, store, rng);
    if (armed_bf16) last_payload = stored.bytes.size() + 4;
    stored.tagged(v, store);
    fp32.tagged(v, Store::kFp32);
  };
  std::string p = "7767517\n6 6\n";
  p += "Input in 0 1 in 0=" + std::to_string(k0) + " 1=" + std::to_string(m) + "\n";
  // Gemm params: 2 transA, 3 transB, 4 constantA, 5 constantB, 6 constantC, 7 M, 8 N, 9 K, 10 C broadcast
  p += "Gemm g0 1 1 in x0 2=0 3=1 4=0 5=1 6=0 7=0 8=" + std::to_string(k1) + " 9=" + std::to_string(k0) + " 10=-1\n";
  weight(static_cast<size_t>(k1) * k0, Store::kBf16, false);
  p += "Gemm g1 1 1 x0 x1 2=0 3=1 4=0 5=1 6=1 7=0 8=" + std::to_string(k2) + " 9=" + std::to_string(k1) + " 10=4\n";
  weight(static_cast<size_t>(k2) * k1, Store::kFp16, false);
  weight(static_cast<size_t>(k2), Store::kBf16, false);  // C: ncnn's own widening (not armed)
  p += "Gemm g2 1 1 x1 x2 2=0 3=1 4=0 5=1 6=0 7=0 8=" + std::to_string(k3) + " 9=" + std::to_string(k2) + " 10=-1\n";
  weight(static_cast<size_t>(k3) * k2, Store::kFp32, false);
  p += "Gemm g3 1 1 x2 x3 2=0 3=1 4=0 5=1 6=0 7=0 8=" + std::to_string(k4) + " 9=" + std::to_string(k3) + " 10=-1\n";
  weight(static_cast<size_t>(k4) * k3, Store::kBf16, true);
  // g4: A constant [m4, k4] (bf16: ncnn widens it, A is never armed), B = x3 [m, k4] with transB=1
  p += "Gemm g4 1 1 x3 out 2=0 3=1 4=1 5=0 6=0 7=" + std::to_string(m4) + " 8=" + std::to_string(m) + " 9=" +
       std::to_string(k4) + " 10=-1\n";
  weight(static_cast<size_t>(m4) * k4, Store::kBf16, false);
  TestNet net;
  net.param = p;
  net.bin_as_stored = stored.bytes;
  net.bin_fp32 = fp32.bytes;
  net.last_payload_start = last_payload;
  return net;
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

void write(const std::string& path, const std::vector<unsigned char>& bytes, size_t n) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(n));
}

ncnn::Mat run(const std::string& param, const std::string& bin, bool mapped) {
  gsurg::NetFiles files;
  files.name = "widening";
  files.param = param;
  files.bin = bin;
  files.inputs = {"in"};
  files.outputs = {"out"};
  files.map_weights = mapped;
  gsurg::LoadedNet net(files, 2);
  std::vector<float> input(3 * 16);
  for (size_t i = 0; i < input.size(); ++i) input[i] = std::sin(static_cast<float>(i) * 0.37f);
  return net.run(gsurg::mat_2d(input.data(), 3, 16)).clone();
}

// Both 2-D w x h float matrices with the same values (a Mat's row padding, cstep, is not compared).
bool identical(const ncnn::Mat& a, const ncnn::Mat& b) {
  return a.dims == 2 && b.dims == 2 && a.w == b.w && a.h == b.h && a.w * a.h > 0 &&
         std::memcmp(a.data, b.data, static_cast<size_t>(a.w) * a.h * sizeof(float)) == 0;
}

void check_net(const std::string& dir) {
  const TestNet net = make_net();
  const std::string param = dir + "/widening.param", stored = dir + "/widening.bin",
                    fp32 = dir + "/widening_fp32.bin", cut = dir + "/widening_cut.bin";
  write(param, net.param);
  write(stored, net.bin_as_stored, net.bin_as_stored.size());
  write(fp32, net.bin_fp32, net.bin_fp32.size());
  write(cut, net.bin_as_stored, net.last_payload_start + 10);

  const int before = gsurg::widened_weights();
  const ncnn::Mat mine = run(param, stored, true);
  const int widened = gsurg::widened_weights() - before;
  const ncnn::Mat ncnns = run(param, stored, false);
  const ncnn::Mat wide = run(param, fp32, true);
  expect(widened == 3, "the mapped load widened the three armed 2-byte B (g0 bf16, g1 fp16, g3 bf16), not C "
                       "nor a constant A: " + std::to_string(widened));
  expect(gsurg::widened_weights() - before == 3, "the --no-mmap load and the fp32 .bin widened nothing here");
  bool finite = mine.dims == 2 && mine.w == 3 && mine.h == 6;
  for (int i = 0; i < mine.w * mine.h && finite; ++i) finite = std::isfinite(static_cast<const float*>(mine.data)[i]);
  expect(finite, "the output is 6x3 and finite (w " + std::to_string(mine.w) + ", h " + std::to_string(mine.h) +
                     ", c " + std::to_string(mine.c) + ", dims " + std::to_string(mine.dims) + ")");
  expect(identical(mine, ncnns), "runner-widened load == ncnn-widened load (map_weights off), bit for bit");
  expect(identical(mine, wide), "runner-widened load == the same values stored fp32, bit for bit");

  bool threw = false;
  std::string message;
  try {
    run(param, cut, true);
  } catch (const gsurg::Error& e) {
    threw = true;
    message = e.what();
  }
  expect(threw && message.find(cut) != std::string::npos,
         "a .bin cut inside an armed bf16 payload is refused naming it: " + message);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  check_conversions();
  const bool drops = gsurg::builtin_gemm_drops_constant_b();
  expect(drops, "this ncnn's builtin Gemm no longer reads a constant B after create_pipeline (lightmode)");
  if (drops) check_net(dir);
  std::printf("%s\n", g_failures ? "weight_widening_check: FAILED" : "weight_widening_check: all ok");
  return g_failures ? 1 : 0;
}

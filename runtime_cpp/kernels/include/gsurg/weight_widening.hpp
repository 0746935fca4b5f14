// Widening the half-size Gemm weights of a mapped .bin in the runner, not in ncnn's loader.
//
// A conversion stored with `--set storage=bf16` (exact for a bf16 checkpoint: every value is one) or fp16
// holds each Gemm's constant B in 2-byte floats. ncnn 1.0.20261020's loader widens such a weight into a new
// fp32 Mat of its own, one element at a time on one thread (Mat::from_bfloat16 / from_float16), and the
// Gemm then repacks that Mat and drops it: every weight costs fresh pages twice (the widened copy and the
// repack), so a bf16 conversion, half the bytes of an fp32 one, loaded slower than it. The widener does it
// instead, on the run's threads, into one buffer (the arena) that every Gemm of the net reuses, so the
// widened copy costs its pages once per net, not once per weight.
//
// Contract:
//   - widen_bf16 / widen_fp16 turn n stored values into fp32 exactly as ncnn's conversions do (bf16: the
//     16 bits shifted up; fp16: IEEE half to single, subnormals, infinities and NaNs included), split over
//     `threads` OpenMP threads.
//   - WeightWidener is the arena plus a one-shot switch. A Gemm layer arms it just before its builtin
//     load_model reads B (arm()); the mapped reader (nets.cpp) asks take_tag() about the next type-0 tag it
//     reads: true only when armed and the tag is bf16 (0x01348B83) or fp16 (0x01306B47), and either way
//     the switch is off again, so only that one weight is taken. For a taken weight the reader hands ncnn an
//     fp32 tag (0) and then, for ncnn's reference() of count*4 bytes, widen(): the payload widened into the
//     arena, whose pointer ncnn wraps in a Mat without copying; the reader advances by the stored bytes.
//   - The arena is overwritten by the next widened weight, so a Gemm may be armed only where its builtin
//     layer keeps no reference to B after create_pipeline: ncnn loads and sets up one layer at a time (its
//     Net::load_model: load_model, then create_pipeline, layer by layer) and its Gemm drops B once it has
//     repacked it, in lightmode. builtin_gemm_drops_constant_b() proves that in the running process, once,
//     under the exact fp32 options the runner arms under (the Gemm set up on an external B, B overwritten
//     with NaN, the same output after as before); where it does not hold, nothing is armed.
//   - release() frees the arena (after the net's load); widened() counts the weights widened in this
//     process, for --verbose.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace gsurg {

void widen_bf16(const uint16_t* src, size_t n, float* dst, int threads);
void widen_fp16(const uint16_t* src, size_t n, float* dst, int threads);

class WeightWidener {
 public:
  static constexpr uint32_t kBf16Tag = 0x01348B83u;
  static constexpr uint32_t kFp16Tag = 0x01306B47u;

  explicit WeightWidener(int threads) : threads_(threads < 1 ? 1 : threads) {}

  void arm() { armed_ = true; }
  void disarm() { armed_ = false; }
  // Whether the tag just read starts a weight to widen here; disarms either way. Remembers the tag.
  bool take_tag(uint32_t tag);
  // Whether a taken tag waits for its payload.
  bool pending() const { return pending_tag_ != 0; }
  // Forgets a taken tag whose payload never came (a short file: ncnn's load fails).
  void drop_pending() { pending_tag_ = 0; }
  // The stored bytes of a pending weight of `count` values (2 each, padded to 4).
  static uint64_t stored_bytes(size_t count) { return (static_cast<uint64_t>(count) * 2 + 3) / 4 * 4; }
  // Widens the pending weight's `count` stored values at `src` into the arena; returns the arena, valid
  // until the next widen() or release(). Null when the arena cannot be allocated.
  const float* widen(const unsigned char* src, size_t count);
  void release();

 private:
  int threads_;
  bool armed_ = false;
  uint32_t pending_tag_ = 0;
  std::unique_ptr<float[]> arena_;
  size_t capacity_ = 0;
};

// Gemm weights widened by a WeightWidener in this process.
int widened_weights();

// Whether this process's builtin Gemm, set up (lightmode, exact fp32 options) on a constant B held outside
// it, no longer reads B afterwards; measured once, on the first call.
bool builtin_gemm_drops_constant_b();

}  // namespace gsurg

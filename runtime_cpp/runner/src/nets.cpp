// Loading and running one ncnn net at the run's precision (exact fp32 by default) with interface checks
// (see nets.hpp).
#include "gsurg/nets.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <datareader.h>

#include "gsurg/error.hpp"
#include "gsurg/files.hpp"
#include "gsurg/lowbit_gemm.hpp"
#include "gsurg/weight_widening.hpp"

namespace gsurg {

namespace {

// Counts the bytes ncnn reads from the .bin, so a .bin longer than its .param needs is caught.
class CountingReader : public ncnn::DataReaderFromStdio {
 public:
  explicit CountingReader(FILE* fp) : ncnn::DataReaderFromStdio(fp) {}
  size_t read(void* buf, size_t size) const override {
    size_t n = ncnn::DataReaderFromStdio::read(buf, size);
    consumed += n;
    return n;
  }
  mutable size_t consumed = 0;
};

// Hands ncnn the mapped .bin: reference() gives a pointer into the mapping (ncnn's ModelBin then wraps it
// in a Mat without copying), read() copies (the 4-byte tags and anything ncnn wants to own). Bounded by
// the file's size, so a short .bin fails the load as it does through stdio. As loading moves on, the pages
// of layers ncnn has finished leave the resident set: ncnn loads and sets up one layer at a time
// (load_model, then create_pipeline, which repacks a Gemm's weights from the mapping), so when a large
// read (kLargeRead) begins, everything before the previous large read belongs to finished layers, and
// those pages are dropped (a layer that keeps referencing the mapping faults its pages back when it runs).
// Dropping everything behind the current read instead would drop a weight whose layer has not been set up
// yet (its scales or bias come after it), and the repack would fault it back in for the rest of the load.
// With a WeightWidener, a bf16 or fp16 weight the widener takes (an armed Gemm's B) is handed to ncnn as
// fp32: its tag read as 0, its payload widened into the widener's arena (weight_widening.hpp); the offset
// moves by the bytes stored, so consumed() still counts the file's bytes.
class MappedReader : public ncnn::DataReader {
 public:
  MappedReader(const MappedFile& file, WeightWidener* widener) : file_(file), widener_(widener) {}
  size_t read(void* buf, size_t size) const override {
    if (widener_ && widener_->pending()) {  // the payload did not fit the file (reference() said so)
      widener_->drop_pending();
      return 0;
    }
    size = std::min<uint64_t>(size, file_.size() - offset_);
    std::memcpy(buf, file_.data() + offset_, size);
    if (widener_ && size == 4) {  // an armed widener's next 4-byte read is the armed Gemm's B tag
      uint32_t tag;
      std::memcpy(&tag, buf, 4);
      if (widener_->take_tag(tag)) std::memset(buf, 0, 4);  // fp32 follows, as far as ncnn can tell
    }
    advance(size);
    return size;
  }
  size_t reference(size_t size, const void** buf) const override {
    if (widener_ && widener_->pending()) {
      const size_t count = size / sizeof(float);
      const uint64_t stored = WeightWidener::stored_bytes(count);
      if (size % sizeof(float) != 0 || stored > file_.size() - offset_) return 0;  // read() then fails
      const float* wide = widener_->widen(file_.data() + offset_, count);
      if (!wide) return 0;
      *buf = wide;
      advance(stored);
      return size;
    }
    if (size > file_.size() - offset_) return 0;  // ncnn falls back to read(), which comes up short
    *buf = file_.data() + offset_;
    advance(size);
    return size;
  }
  uint64_t consumed() const { return offset_; }

 private:
  static constexpr uint64_t kLargeRead = uint64_t(256) << 10;
  void advance(uint64_t size) const {
    if (size >= kLargeRead) {
      if (previous_large_ > released_) file_.release(released_, previous_large_ - released_);
      released_ = std::max(released_, previous_large_);
      previous_large_ = offset_;
    }
    offset_ += size;
  }
  const MappedFile& file_;
  WeightWidener* widener_;
  mutable uint64_t offset_ = 0;
  mutable uint64_t released_ = 0;
  mutable uint64_t previous_large_ = 0;
};

using FilePtr = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

FilePtr open_or_throw(const std::string& path) {
  FilePtr f(fopen_utf8(path, "rb"), &std::fclose);
  if (!f) throw Error(path + ": cannot open: " + std::strerror(errno));
  return f;
}

uint64_t file_size(std::FILE* f) {
#ifdef _WIN32
  _fseeki64(f, 0, SEEK_END);
  uint64_t size = static_cast<uint64_t>(_ftelli64(f));
  _fseeki64(f, 0, SEEK_SET);
#else
  fseeko(f, 0, SEEK_END);
  uint64_t size = static_cast<uint64_t>(ftello(f));
  fseeko(f, 0, SEEK_SET);
#endif
  return size;
}

bool contains(const std::vector<const char*>& names, const std::string& name) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return name == n; });
}

}  // namespace

LoadedNet::LoadedNet(const NetFiles& files, int threads)
    : files_(files),
      widener_(files.map_weights && files.precision == Precision::kFp32 && builtin_gemm_drops_constant_b()
                   ? new WeightWidener(threads)
                   : nullptr),
      net_(has_block_quantized_gemm(files.param) || widener_
               ? new LowBitNet(files.quantize_int4_input, widener_.get())
               : new ncnn::Net) {
  ncnn::Option& opt = net_->opt;
  if (files.precision != Precision::kAuto) {
    const bool fp16 = files.precision == Precision::kFp16;
    opt.use_fp16_storage = fp16;
    opt.use_fp16_packed = fp16;
    opt.use_fp16_arithmetic = fp16;
    opt.use_bf16_storage = false;
    opt.use_bf16_packed = false;
    opt.use_packing_layout = fp16;
  }
  opt.use_vulkan_compute = false;
  opt.num_threads = std::max(1, threads);
  {
    FilePtr f = open_or_throw(files.param);
    if (net_->load_param(f.get()) != 0) throw Error(files.param + ": ncnn cannot parse this .param");
  }
  for (const auto& blob : files.inputs) {
    if (!contains(net_->input_names(), blob))
      throw Error(files.param + ": no input blob \"" + blob + "\" (model.json nets." + files.name
          + ".inputs)");
  }
  for (const auto& blob : files.outputs) {
    if (!contains(net_->output_names(), blob))
      throw Error(files.param + ": no output blob \"" + blob + "\" (model.json nets." + files.name
          + ".outputs)");
  }
  graph_ = ParamGraph::read(files.param);
  if (files.map_weights) {
    bin_map_.reset(new MappedFile(files.bin));
    if (bin_map_->mapped()) {
      load_weights_mapped(*bin_map_);
      return;
    }
    bin_map_.reset();  // the platform would not map it: read it as below
  }
  load_weights_read();
}

namespace {

[[noreturn]] void throw_bad_bin(const NetFiles& files) {
  throw Error(files.bin + ": too short or malformed for " + files.param + " (ncnn could not load its weights)");
}

void check_consumed(const NetFiles& files, uint64_t consumed, uint64_t size) {
  if (consumed != size)
    throw Error(files.bin + ": " + files.param + " reads " + std::to_string(consumed) + " of its " +
                std::to_string(size) + " bytes: the .bin does not belong to this .param");
}

}  // namespace

void LoadedNet::load_weights_mapped(const MappedFile& bin) {
  MappedReader reader(bin, widener_.get());
  const int ret = net_->load_model(reader);
  if (widener_) widener_->release();
  bin.release(0, bin.size());  // the last layer's pages too: whatever runs faults back what it keeps
  if (ret != 0) throw_bad_bin(files_);
  check_consumed(files_, reader.consumed(), bin.size());
}

void LoadedNet::load_weights_read() {
  FilePtr f = open_or_throw(files_.bin);
  uint64_t size = file_size(f.get());
  CountingReader reader(f.get());
  if (net_->load_model(reader) != 0) throw_bad_bin(files_);
  check_consumed(files_, reader.consumed, size);
}

void LoadedNet::input(ncnn::Extractor& ex, const std::string& blob, const ncnn::Mat& mat) const {
  if (ex.input(blob.c_str(), mat) != 0) throw Error(files_.param + ": cannot feed input blob \"" + blob
      + "\"");
}

ncnn::Mat LoadedNet::extract(ncnn::Extractor& ex, const std::string& blob, int type) const {
  ncnn::Mat out;
  int ret = ex.extract(blob.c_str(), out, type);
  if (ret != 0 || out.empty())
    throw Error(files_.param + ": ncnn failed computing blob \"" + blob + "\" (returned "
        + std::to_string(ret) + ")");
  return out;
}

ncnn::Mat LoadedNet::run(const ncnn::Mat& in) const {
  ncnn::Extractor ex = extractor();
  input(ex, files_.inputs[0], in);
  return extract(ex, files_.outputs[0]);
}

ncnn::Mat mat_2d(const float* data, int rows, int cols) {
  ncnn::Mat m(cols, rows, static_cast<size_t>(4u));
  if (m.empty()) throw Error("out of memory allocating a " + std::to_string(rows) + "x"
      + std::to_string(cols) + " matrix");
  for (int r = 0; r < rows; ++r)
    std::memcpy(m.row(r), data + static_cast<size_t>(r) * cols, sizeof(float) * static_cast<size_t>(cols));
  return m;
}

std::vector<float> mat_rows(const ncnn::Mat& m, int expected_cols, const std::string& what) {
  if (m.dims != 2 || m.elemsize != 4 || m.elempack != 1 || m.w != expected_cols)
    throw Error(what + ": expected a [rows, " + std::to_string(expected_cols) + "] float matrix, got dims " +
                std::to_string(m.dims) + " w " + std::to_string(m.w) + " h " + std::to_string(m.h));
  std::vector<float> out(static_cast<size_t>(m.h) * m.w);
  for (int r = 0; r < m.h; ++r)
    std::memcpy(&out[static_cast<size_t>(r) * m.w], m.row(r), sizeof(float) * static_cast<size_t>(m.w));
  return out;
}

}  // namespace gsurg

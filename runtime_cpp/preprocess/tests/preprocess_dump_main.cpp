// The driver of the families' preprocess dump programs (see preprocess_dump.hpp).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gsurg/error.hpp"
#include "gsurg/files.hpp"
#include "gsurg/image.hpp"
#include "gsurg/sanitizer_defaults.hpp"
#include "preprocess_dump.hpp"

namespace gsurg::dump {

namespace {

void parse(const std::vector<std::string>& args, const Processor& processor, Options* o) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (i + 1 >= args.size()) throw Error("option " + a + " needs a value");
    const std::string& v = args[++i];
    if (a == processor.option) o->processor = v;
    else if (a == "--image") o->image = v;
    else if (a == "--size") o->size = v;
    else if (a == "--out") o->out = v;
    else if (a == "--resized") o->resized = v;
    else if (a == "--decoded") o->decoded = v;
    else if (a == "--alpha") o->alpha = v;
    else if (a == "--composited") o->composited = v;
    else if (a == "--jobs") o->jobs = v;
    else if (a == "--target-of") o->target_of = v;
    else throw Error("unknown option " + a);
  }
}

// Runs one job; returns what to print after "ok".
std::string run(const Options& o, const Processor& processor) {
  if (!o.processor.empty()) return processor.run(o);
  if (!o.image.empty() && o.target_of.empty() && o.size.empty() && o.out.empty() && o.resized.empty()) {
    load(o);  // decode only
    return "";
  }
  throw Error(std::string(processor.option) + " is required");
}

int run_jobs(const Options& base, const Processor& processor) {
  const std::string text = read_file(base.jobs);
  std::istringstream lines(text);
  std::string line;
  int index = 0, failed = 0;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> args;
    std::istringstream fields(line);
    std::string field;
    while (std::getline(fields, field, '\t')) args.push_back(field);
    Options o = base;
    o.jobs.clear();
    try {
      parse(args, processor, &o);
      const std::string extra = run(o, processor);
      std::cout << "job " << index << ": ok" << (extra.empty() ? "" : " ") << extra << "\n";
    } catch (const std::exception& e) {
      std::cout << "job " << index << ": error: " << e.what() << "\n";
      ++failed;
    }
    ++index;
  }
  std::cout.flush();
  return failed == 0 ? 0 : 1;
}

}  // namespace

void write_npy(const std::string& path, const char* descr, const std::vector<size_t>& shape,
               const void* data, size_t bytes) {
  std::string shape_text = "(";
  for (size_t d : shape) shape_text += std::to_string(d) + ", ";
  shape_text += ")";
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape_text + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(fopen_utf8(path, "wb"), &std::fclose);
  if (!f) throw Error(path + ": cannot create the file");
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  const unsigned char len[2] = {static_cast<unsigned char>(header.size() & 0xff),
                                static_cast<unsigned char>(header.size() >> 8)};
  bool ok = std::fwrite(magic, 1, 8, f.get()) == 8 && std::fwrite(len, 1, 2, f.get()) == 2 &&
            std::fwrite(header.data(), 1, header.size(), f.get()) == header.size() &&
            (bytes == 0 || std::fwrite(data, 1, bytes, f.get()) == bytes);  // no data: never fwrite(nullptr)
  if (!ok || std::fflush(f.get()) != 0) throw Error(path + ": write failed");
}

void write_rgb(const std::string& path, const Image& img) {
  write_npy(path, "|u1", {static_cast<size_t>(img.height), static_cast<size_t>(img.width), 3},
            img.rgb.data(), img.rgb.size());
}

// The decoded image and, when asked, its --decoded, --alpha and --composited dumps.
Image load(const Options& o) {
  Image img = load_image(o.image);
  if (!o.decoded.empty()) write_rgb(o.decoded, img);
  if (!o.alpha.empty()) {
    std::vector<size_t> shape{static_cast<size_t>(img.height), static_cast<size_t>(img.width)};
    if (img.alpha.empty()) shape = {0};
    write_npy(o.alpha, "|u1", shape, img.alpha.data(), img.alpha.size());
  }
  if (!o.composited.empty()) write_rgb(o.composited, composite_on_white(img));
  return img;
}

TargetSize parse_size(const std::string& text) {
  int h = 0, w = 0;
  char x = 0, extra = 0;
  std::istringstream in(text);
  if (!(in >> h >> x >> w) || x != 'x' || (in >> extra) || h < 1 || w < 1) {
    throw Error("--size must be HxW with positive integers, not " + text);
  }
  return TargetSize{h, w};
}

nlohmann::json read_json(const std::string& path) {
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
}

std::string size_text(int height, int width) { return std::to_string(height) + "x" + std::to_string(width); }

int main(int argc, char** argv, const char* program, const Processor& processor) {
  try {
    Options o;
    parse(std::vector<std::string>(argv + 1, argv + argc), processor, &o);
    if (!o.jobs.empty()) return run_jobs(o, processor);
    const std::string extra = run(o, processor);
    if (!extra.empty()) std::cout << extra << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace gsurg::dump

// The driver shared by the families' preprocess dump programs (<family>_preprocess_dump, in
// runtime_cpp/families/<name>/tests/): they run gsurg_preprocess and the family's image processor on images
// and write what was computed as .npy files, for the parity checkers (runtime_cpp/tests/check_preprocess*.py
// and the families' own). Not part of the runtime.
//
//   PROGRAM OPTION SETTINGS.json (--target-of HxW | --image PATH [--size HxW] [--out PV.npy]
//           [--resized RGB.npy] [--decoded RGB.npy])
//   PROGRAM OPTION SETTINGS.json --jobs JOBS.txt
//   PROGRAM --image PATH [--decoded RGB.npy] [--alpha A.npy] [--composited RGB.npy]
//
// OPTION is the family's (Processor::option, e.g. --config): the processor's settings file. --size forces
// the resize target (H x W) instead of the processor's; --resized writes the resized RGB image and
// --decoded the decoded one, as uint8 [H, W, 3] (with --resized any --size is allowed, not only multiples of
// the patch); --out writes pixel_values as float32 in the family's layout. --target-of HxW: the resize
// target of an image of that size, with no image read. --jobs runs one job per line of JOBS.txt, each line
// the options above separated by tabs (on top of the options given on the command line), and prints
// "job N: ok[ WHAT]" or "job N: error: MESSAGE" per line (WHAT: what the processor's job returned), so one
// process serves a whole test (one wine start for the Windows build). Exit 0 when every job succeeded.
// Without OPTION an image is only decoded: --alpha writes Image::alpha as uint8 [H, W] (shape [0] when the
// image has none), --composited composite_on_white() as uint8 [H, W, 3] (both are accepted in the
// processor's image jobs too).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gsurg/image.hpp"
#include "gsurg/pixel_values.hpp"

namespace gsurg::dump {

struct Options {
  std::string processor;  // the value of the family's option: its settings file
  std::string image, size, out, resized, decoded, alpha, composited, jobs, target_of;
};

// A family's image processor as its dump program runs it.
struct Processor {
  const char* option;                    // e.g. "--config"
  std::string (*run)(const Options& o);  // one job with o.processor set; returns what to print after "ok"
};

void write_npy(const std::string& path, const char* descr, const std::vector<size_t>& shape, const void* data,
               size_t bytes);
void write_rgb(const std::string& path, const Image& img);
// The decoded image and, when asked, its --decoded, --alpha and --composited dumps.
Image load(const Options& o);
TargetSize parse_size(const std::string& text);
nlohmann::json read_json(const std::string& path);
std::string size_text(int height, int width);

// The program: parses argv (PROGRAM names it in errors), runs the job or the --jobs file.
int main(int argc, char** argv, const char* program, const Processor& processor);

}  // namespace gsurg::dump

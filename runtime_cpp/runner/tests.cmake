# ctest checks of penguin_vl_run (runtime_cpp/tests/check_generate.py): the tiny model is converted once
# (fixture runner_model), then greedy tokens are compared with the PyTorch reference, sampling is checked
# for determinism, and bad inputs must give exit code 2 and a message naming the culprit (and, in the
# GSURG_SANITIZE build, so must every mutated input of runner_fuzz).
# GSURG_PYTHON: a Python with torch, tokenizers, Pillow and the repository's requirements;
# GSURG_TEST_WRAPPER: a command the built program runs under (e.g. wine for the mingw build), empty natively.
if(NOT DEFINED GSURG_PYTHON)  # normally set by the top-level CMakeLists
  find_package(Python3 COMPONENTS Interpreter)
  set(_gsurg_python_default "")
  if(Python3_FOUND)
    set(_gsurg_python_default "${Python3_EXECUTABLE}")
  endif()
  set(GSURG_PYTHON "${_gsurg_python_default}" CACHE FILEPATH "Python that runs the parity checks")
endif()
set(GSURG_TEST_WRAPPER "" CACHE STRING "Command the built programs run under in tests (e.g. wine)")

# The 4/6-bit Gemm kernel against ncnn's builtin Gemm, bit for bit (tests/lowbit_gemm_check.cpp); no model
# needed, so it runs first and on every build (mingw under wine, aarch64 under qemu through the emulator).
add_executable(gsurg_lowbit_gemm_check tests/lowbit_gemm_check.cpp)
target_link_libraries(gsurg_lowbit_gemm_check PRIVATE gsurg_runner)
add_test(NAME runner_lowbit_gemm COMMAND gsurg_lowbit_gemm_check)
set_tests_properties(runner_lowbit_gemm PROPERTIES TIMEOUT 600)

# The 8-bit kernel against ncnn's builtin Gemm and against a scalar model of its stated arithmetic
# (tests/int8_gemm_check.cpp), whose float steps must not be contracted either.
add_executable(gsurg_int8_gemm_check tests/int8_gemm_check.cpp)
target_link_libraries(gsurg_int8_gemm_check PRIVATE gsurg_runner)
if(NOT MSVC)
  set_source_files_properties(tests/int8_gemm_check.cpp PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
endif()
add_test(NAME runner_int8_gemm COMMAND gsurg_int8_gemm_check)
set_tests_properties(runner_int8_gemm PROPERTIES TIMEOUT 600)

# The opt-in 4-bit kernel that quantizes its input (tests/w4a8_gemm_check.cpp): every instance against a
# model of its stated arithmetic bit for bit, and that model against ncnn's float loop within the rounding
# of the input; its float steps must not be contracted either.
add_executable(gsurg_w4a8_gemm_check tests/w4a8_gemm_check.cpp)
target_link_libraries(gsurg_w4a8_gemm_check PRIVATE gsurg_runner)
if(NOT MSVC)
  set_source_files_properties(tests/w4a8_gemm_check.cpp PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
endif()
add_test(NAME runner_w4a8_gemm COMMAND gsurg_w4a8_gemm_check)
set_tests_properties(runner_w4a8_gemm PROPERTIES TIMEOUT 600)

# Transparent huge pages for large buffers (tests/huge_pages_check.cpp): the wrapper reaches ncnn's own
# allocations and advises only whole huge pages inside them; skipped (77) where they cannot be advised.
add_executable(gsurg_huge_pages_check tests/huge_pages_check.cpp)
target_link_libraries(gsurg_huge_pages_check PRIVATE gsurg_runner)
add_test(NAME runner_huge_pages COMMAND gsurg_huge_pages_check)
set_tests_properties(runner_huge_pages PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)

# The runner's widening of bf16 / fp16 Gemm weights on a mapped load (tests/weight_widening_check.cpp): its
# conversions against ncnn's on every 16-bit value, and a small net of Gemms loaded with it, with ncnn's own
# widening and from an fp32 .bin: the same output bit for bit.
add_executable(gsurg_weight_widening_check tests/weight_widening_check.cpp)
target_link_libraries(gsurg_weight_widening_check PRIVATE gsurg_runner)
add_test(NAME runner_weight_widening COMMAND gsurg_weight_widening_check ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(runner_weight_widening PROPERTIES TIMEOUT 120)

if(NOT GSURG_PYTHON)
  message(WARNING "runner: no Python found (set GSURG_PYTHON): the runner parity tests are not registered")
  return()
endif()

set(GSURG_TEST_MODEL_DIR "${CMAKE_BINARY_DIR}/gsurg_model" CACHE PATH
    "Where runner_convert_model converts the tiny model (another build tree's, to share one conversion)")
set(_gsurg_check ${CMAKE_CURRENT_SOURCE_DIR}/../tests/check_generate.py)
set(_gsurg_model ${GSURG_TEST_MODEL_DIR})
set(_gsurg_run_args --runner $<TARGET_FILE:penguin_vl_run> --model ${_gsurg_model})
if(GSURG_TEST_WRAPPER)
  list(APPEND _gsurg_run_args --wrapper "${GSURG_TEST_WRAPPER}")
endif()
if(GSURG_RUNNER_HAS_TOKENIZER)
  list(APPEND _gsurg_run_args --with-tokenizer)
endif()
if(GSURG_RUNNER_HAS_PREPROCESS)
  list(APPEND _gsurg_run_args --with-preprocess)
endif()

add_test(NAME runner_convert_model
  COMMAND ${GSURG_PYTHON} ${_gsurg_check} convert --out ${_gsurg_model} --untied-out ${_gsurg_model}_untied)
set_tests_properties(runner_convert_model PROPERTIES FIXTURES_SETUP runner_model TIMEOUT 600)

foreach(mode greedy sampling bad-input)
  string(REPLACE "-" "_" _name "runner_${mode}")
  set(_extra "")
  if(mode STREQUAL "greedy")
    set(_extra --untied-model ${_gsurg_model}_untied)
  endif()
  add_test(NAME ${_name} COMMAND ${GSURG_PYTHON} ${_gsurg_check} ${mode} ${_gsurg_run_args} ${_extra})
  set_tests_properties(${_name} PROPERTIES FIXTURES_REQUIRED runner_model TIMEOUT 900)
endforeach()

# The bounded mutation test of the input readers (model.json, images, tokenizer.json): in the sanitizer
# build, where a memory error or UB is a report rather than luck.
if(GSURG_SANITIZE)
  add_test(NAME runner_fuzz COMMAND ${GSURG_PYTHON} ${_gsurg_check} fuzz ${_gsurg_run_args})
  set_tests_properties(runner_fuzz PROPERTIES FIXTURES_REQUIRED runner_model TIMEOUT 600)
endif()

# The core/family seams in C++ (tests/family_seams.cpp): the registry, the family model.json makes, and
# that the decoder takes the RoPE tables and extra inputs a step is given, on the same tiny model.
add_executable(gsurg_family_seams tests/family_seams.cpp)
target_link_libraries(gsurg_family_seams PRIVATE gsurg_runner)
add_test(NAME runner_family_seams COMMAND gsurg_family_seams ${_gsurg_model})
set_tests_properties(runner_family_seams PROPERTIES FIXTURES_REQUIRED runner_model TIMEOUT 300)

# qwen3_vl_run (the same program under the Qwen3-VL family's name) against HF transformers' Qwen3-VL
# (runtime_cpp/tests/check_qwen3_vl.py): the tiny checkpoint converted once (fixture qwen3_vl_model), greedy
# tokens equal HF generate's over portrait / landscape / two images / text only and the debug inputs, and
# its bad inputs exit 2 naming the culprit.
set(GSURG_QWEN3_VL_MODEL_DIR "${CMAKE_BINARY_DIR}/qwen3_vl_model" CACHE PATH
    "Where qwen3_vl_convert_model converts the tiny Qwen3-VL (another build tree's, to share one conversion)")
set(_q3_check ${CMAKE_CURRENT_SOURCE_DIR}/../tests/check_qwen3_vl.py)
set(_q3_run_args --runner $<TARGET_FILE:qwen3_vl_run> --model ${GSURG_QWEN3_VL_MODEL_DIR})
if(GSURG_TEST_WRAPPER)
  list(APPEND _q3_run_args --wrapper "${GSURG_TEST_WRAPPER}")
endif()
if(GSURG_RUNNER_HAS_TOKENIZER)
  list(APPEND _q3_run_args --with-tokenizer)
endif()
if(GSURG_RUNNER_HAS_PREPROCESS)
  list(APPEND _q3_run_args --with-preprocess)
endif()
add_test(NAME qwen3_vl_convert_model COMMAND ${GSURG_PYTHON} ${_q3_check} convert --out ${GSURG_QWEN3_VL_MODEL_DIR})
set_tests_properties(qwen3_vl_convert_model PROPERTIES FIXTURES_SETUP qwen3_vl_model TIMEOUT 600)
foreach(mode greedy bad-input)
  string(REPLACE "-" "_" _name "qwen3_vl_${mode}")
  add_test(NAME ${_name} COMMAND ${GSURG_PYTHON} ${_q3_check} ${mode} ${_q3_run_args})
  set_tests_properties(${_name} PROPERTIES FIXTURES_REQUIRED qwen3_vl_model TIMEOUT 900)
endforeach()

# The block-quantized and fp16 paths of both programs against the ncnn wheel running the same converted nets
# in Python (runtime_cpp/tests/check_precision.py): the tiny checkpoints converted once more at storage int8,
# int4 and bf16 (fixtures runner_quantized_models, qwen3_vl_quantized_models; beside the fp32 conversions, so
# a build tree that shares those shares these), then greedy tokens equal the chain's at --precision fp32 on
# them (bf16: widened by the runner, and by ncnn with --no-mmap) and at fp16 / auto on the fp32 conversion,
# and a corrupted block_quant or --precision fp8 exits 2.
set(_prec_check ${CMAKE_CURRENT_SOURCE_DIR}/../tests/check_precision.py)
foreach(family penguin_vl qwen3_vl)
  if(family STREQUAL "penguin_vl")
    set(_prefix runner)
    set(_fp32 ${_gsurg_model})
    set(_program penguin_vl_run)
  else()
    set(_prefix qwen3_vl)
    set(_fp32 ${GSURG_QWEN3_VL_MODEL_DIR})
    set(_program qwen3_vl_run)
  endif()
  set(_quantized --quantized int8=${_fp32}_int8 --quantized int4=${_fp32}_int4 --quantized bf16=${_fp32}_bf16)
  add_test(NAME ${_prefix}_convert_quantized
    COMMAND ${GSURG_PYTHON} ${_prec_check} convert --family ${family} ${_quantized})
  set_tests_properties(${_prefix}_convert_quantized PROPERTIES
    FIXTURES_SETUP ${_prefix}_quantized_models TIMEOUT 900)
  set(_args --family ${family} --runner $<TARGET_FILE:${_program}> --model ${_fp32} ${_quantized})
  if(GSURG_TEST_WRAPPER)
    list(APPEND _args --wrapper "${GSURG_TEST_WRAPPER}")
  endif()
  if(CMAKE_CROSSCOMPILING)  # another ncnn build than the wheel's: int8 kernels, and on ARM fp16 arithmetic
    list(APPEND _args --cross-prefix 4)
  endif()
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm)")  # real fp16 arithmetic: not the x86 wheel's; and
    list(APPEND _args --fp16-teacher-forced --int8-teacher-forced)  # NEON 8-bit rounding
  endif()
  add_test(NAME ${_prefix}_precision COMMAND ${GSURG_PYTHON} ${_prec_check} check ${_args})
  set_tests_properties(${_prefix}_precision PROPERTIES
    FIXTURES_REQUIRED "${_prefix}_model;${_prefix}_quantized_models" TIMEOUT 900)
endforeach()

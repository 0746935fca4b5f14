# The runtime's families and programs (included by the top-level CMakeLists).
#
# A family is a folder runtime_cpp/families/<name>/ whose CMakeLists.txt makes one call:
#
#   gsurg_add_family(NAME <name> ENTRY <function> SOURCES <file>...
#                    [PREPROCESS_SOURCES <file>...] [ALIAS <program>])
#
#   NAME                the folder's name (penguin_vl): its CMake targets and tests are named after it;
#   ENTRY               the C++ function returning the family's gsurg::FamilyEntry (gsurg/family_registry.hpp:
#                       model.json's "family" name and version, the factory), declared and listed by the
#                       generated registry;
#   SOURCES             the family's C++ (config, prompt, vision, positions), compiled into gsurg_runner with
#                       the folder's include/ on its include path;
#   PREPROCESS_SOURCES  its image processor, built as gsurg_<name>_preprocess on gsurg_preprocess (rounded as
#                       gsurg_preprocess is: no fused multiply-add) and linked into gsurg_runner; left out,
#                       with the family's --image, when runtime_cpp/preprocess is not built;
#   ALIAS               a program name for the family (<name>_run): the same program as gsurg_run.
#
# The folder's tests.cmake, when there is one, registers its ctests (GSURG_BUILD_TESTS). The top-level
# CMakeLists adds every families/*/CMakeLists.txt, then gsurg_write_family_registry() generates the table
# of families (families.cpp) from what they registered: adding a family edits no shared file.

set(GSURG_CMAKE_DIR ${CMAKE_CURRENT_LIST_DIR})

# gsurg_add_program(NAME): the runner's program under NAME (main.cpp; the name is only what it reports itself
# by in errors and usage). Every program is put in the runner's build folder.
function(gsurg_add_program name)
  add_executable(${name} ${PROJECT_SOURCE_DIR}/runner/src/main.cpp)
  target_link_libraries(${name} PRIVATE gsurg_runner)
  target_compile_definitions(${name} PRIVATE GSURG_PROGRAM_NAME="${name}")
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/runner)
endfunction()

# gsurg_fp_contract_off(TARGET): no fused multiply-add contraction in TARGET's sources (GCC/Clang:
# -ffp-contract=off; MSVC 2022 contracts only under /fp:contract or /fp:fast), for arithmetic that must
# round as its reference does.
function(gsurg_fp_contract_off target)
  if(MSVC)
    target_compile_options(${target} PRIVATE /fp:precise)
  else()
    target_compile_options(${target} PRIVATE -ffp-contract=off)
  endif()
endfunction()

function(gsurg_add_family)
  cmake_parse_arguments(F "" "NAME;ENTRY;ALIAS" "SOURCES;PREPROCESS_SOURCES" ${ARGN})
  if(F_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "gsurg_add_family: unknown arguments ${F_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT F_NAME OR NOT F_ENTRY OR NOT F_SOURCES)
    message(FATAL_ERROR "gsurg_add_family needs NAME, ENTRY and SOURCES (${CMAKE_CURRENT_SOURCE_DIR})")
  endif()
  if(NOT F_ENTRY MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
    message(FATAL_ERROR "gsurg_add_family(${F_NAME}): ENTRY must be a C++ function name, not ${F_ENTRY}")
  endif()
  get_property(names GLOBAL PROPERTY GSURG_FAMILY_NAMES)
  get_property(entries GLOBAL PROPERTY GSURG_FAMILY_ENTRIES)
  if(F_NAME IN_LIST names OR F_ENTRY IN_LIST entries)
    message(FATAL_ERROR "gsurg_add_family(${F_NAME}): the family or its entry ${F_ENTRY} is registered twice")
  endif()
  set_property(GLOBAL APPEND PROPERTY GSURG_FAMILY_NAMES ${F_NAME})
  set_property(GLOBAL APPEND PROPERTY GSURG_FAMILY_ENTRIES ${F_ENTRY})

  set(dir ${CMAKE_CURRENT_SOURCE_DIR})
  list(TRANSFORM F_SOURCES PREPEND ${dir}/)
  target_sources(gsurg_runner PRIVATE ${F_SOURCES})
  target_include_directories(gsurg_runner PUBLIC ${dir}/include)
  if(F_PREPROCESS_SOURCES AND TARGET gsurg_preprocess)
    add_library(gsurg_${F_NAME}_preprocess STATIC ${F_PREPROCESS_SOURCES})
    target_include_directories(gsurg_${F_NAME}_preprocess PUBLIC ${dir}/include)
    target_link_libraries(gsurg_${F_NAME}_preprocess PUBLIC gsurg_preprocess)
    gsurg_fp_contract_off(gsurg_${F_NAME}_preprocess)
    target_link_libraries(gsurg_runner PUBLIC gsurg_${F_NAME}_preprocess)
  endif()
  if(F_ALIAS)
    gsurg_add_program(${F_ALIAS})
  endif()
  if(GSURG_BUILD_TESTS AND EXISTS ${dir}/tests.cmake)
    include(${dir}/tests.cmake)
  endif()
endfunction()

# The registry: families.cpp generated from the families' ENTRY functions, in the order they were added,
# compiled into gsurg_runner (gsurg/family_registry.hpp declares families()).
function(gsurg_write_family_registry)
  get_property(entries GLOBAL PROPERTY GSURG_FAMILY_ENTRIES)
  set(GSURG_FAMILY_DECLARATIONS "")
  set(GSURG_FAMILY_TABLE "")
  foreach(entry IN LISTS entries)
    string(APPEND GSURG_FAMILY_DECLARATIONS "FamilyEntry ${entry}();\n")
    string(APPEND GSURG_FAMILY_TABLE "      ${entry}(),\n")
  endforeach()
  set(out ${PROJECT_BINARY_DIR}/generated/families.cpp)
  configure_file(${GSURG_CMAKE_DIR}/families.cpp.in ${out} @ONLY)
  target_sources(gsurg_runner PRIVATE ${out})
endfunction()

# For the families' tests.cmake ----------------------------------------------------------------------------

# gsurg_runner_check_args(VAR PROGRAM MODEL_DIR): the arguments every runner checker takes (runner_harness.py):
# the program, the converted model, the wrapper the program runs under, and which optional parts it has.
function(gsurg_runner_check_args var program model)
  set(args --runner $<TARGET_FILE:${program}> --model ${model})
  if(GSURG_TEST_WRAPPER)
    list(APPEND args --wrapper "${GSURG_TEST_WRAPPER}")
  endif()
  if(GSURG_RUNNER_HAS_TOKENIZER)
    list(APPEND args --with-tokenizer)
  endif()
  if(GSURG_RUNNER_HAS_PREPROCESS)
    list(APPEND args --with-preprocess)
  endif()
  set(${var} ${args} PARENT_SCOPE)
endfunction()

# gsurg_precision_tests(FAMILY PREFIX PROGRAM MODEL_DIR): the block-quantized and fp16 paths of PROGRAM
# against the ncnn wheel running the same converted nets in Python (runtime_cpp/tests/check_precision.py
# --family FAMILY): the tiny checkpoint converted once more at storage int8, int4 and bf16 (PREFIX_convert_quantized,
# fixture PREFIX_quantized_models, beside the fp32 conversion MODEL_DIR so a build tree that shares that
# shares these), then PREFIX_precision: greedy tokens equal the chain's at --precision fp32 on them (bf16:
# widened by the runner, and by ncnn with --no-mmap) and at fp16 / auto on the fp32 conversion (fixture
# PREFIX_model), and a corrupted block_quant or --precision fp8 exits 2.
function(gsurg_precision_tests family prefix program fp32)
  set(check ${PROJECT_SOURCE_DIR}/tests/check_precision.py)
  set(quantized --quantized int8=${fp32}_int8 --quantized int4=${fp32}_int4 --quantized bf16=${fp32}_bf16)
  add_test(NAME ${prefix}_convert_quantized
    COMMAND ${GSURG_PYTHON} ${check} convert --family ${family} ${quantized})
  set_tests_properties(${prefix}_convert_quantized PROPERTIES
    FIXTURES_SETUP ${prefix}_quantized_models TIMEOUT 900 ENVIRONMENT "${GSURG_CHECK_ENVIRONMENT}")
  set(args --family ${family} --runner $<TARGET_FILE:${program}> --model ${fp32} ${quantized})
  if(GSURG_TEST_WRAPPER)
    list(APPEND args --wrapper "${GSURG_TEST_WRAPPER}")
  endif()
  if(CMAKE_CROSSCOMPILING)  # another ncnn build than the wheel's: its 8-bit kernels sum in their own order
    list(APPEND args --cross-prefix 4 --int8-teacher-forced)
  endif()
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm)")  # real fp16 arithmetic: not the x86 wheel's
    list(APPEND args --fp16-teacher-forced)
  endif()
  add_test(NAME ${prefix}_precision COMMAND ${GSURG_PYTHON} ${check} check ${args})
  set_tests_properties(${prefix}_precision PROPERTIES
    FIXTURES_REQUIRED "${prefix}_model;${prefix}_quantized_models" TIMEOUT 900
    ENVIRONMENT "${GSURG_CHECK_ENVIRONMENT}")
endfunction()

# gsurg_preprocess_dump(NAME SOURCE): the family's <NAME> dump program (its processor's job on the driver of
# runtime_cpp/preprocess/tests/preprocess_dump.hpp), for its preprocess parity ctest; ARGN: the libraries
# with the processor. Not built (no target NAME) without runtime_cpp/preprocess.
function(gsurg_preprocess_dump name source)
  if(NOT TARGET gsurg_preprocess_dump_main)
    return()
  endif()
  add_executable(${name} ${source})
  target_link_libraries(${name} PRIVATE gsurg_preprocess_dump_main)
  foreach(lib IN LISTS ARGN)
    target_link_libraries(${name} PRIVATE ${lib})
  endforeach()
endfunction()

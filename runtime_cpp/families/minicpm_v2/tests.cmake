# MiniCPM-V-2's ctests.
#
# minicpm_v2_preprocess_parity: the image processor (gsurg_minicpm_v2_preprocess) and the position tables
# (gsurg_minicpm_v2_positions), through minicpm_v2_preprocess_dump, against goldens computed at test time
# (runtime_cpp/tests/check_preprocess_minicpmv2.py): the Python processor graphsurgeon/models/minicpm_v2
# (itself checked against the official code under Pillow 10.1.0) and Pillow for the plans and every uint8 and
# float32 image, torch's F.interpolate for the resampled position table, numpy for the sin-cos table.
#
# minicpm_v2_run (the alias: the same program as gsurg_run) against the family's fp32 Python reference
# (tests/check_minicpm_v2.py): the tiny checkpoint converted once (fixture minicpm_v2_model), greedy tokens
# and prompt ids equal the reference's over unsliced, 2x2 and 3x3 sliced images, two images, text only, the
# extreme sizes the official slicing takes and the debug inputs; bad inputs exit 2 naming the culprit; then
# the quantized and fp16 paths of the program against the ncnn wheel (gsurg_precision_tests).
gsurg_preprocess_dump(minicpm_v2_preprocess_dump tests/minicpm_v2_preprocess_dump.cpp gsurg_minicpm_v2_preprocess
  gsurg_minicpm_v2_positions)

# The alias runs the same program under the family's name: its usage names it.
add_test(NAME minicpm_v2_alias COMMAND minicpm_v2_run --help)
set_tests_properties(minicpm_v2_alias PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION "usage: minicpm_v2_run --model DIR.*gsurg apply rules/minicpm_v2.yaml")

if(NOT GSURG_PYTHON)
  message(WARNING "minicpm_v2: no Python found (set GSURG_PYTHON): its parity tests are not registered")
else()
  set(_wrapper_args "")
  if(GSURG_TEST_WRAPPER)
    set(_wrapper_args --wrapper "${GSURG_TEST_WRAPPER}")
  endif()
  if(TARGET minicpm_v2_preprocess_dump)
    add_test(NAME minicpm_v2_preprocess_parity
      COMMAND "${GSURG_PYTHON}" "${PROJECT_SOURCE_DIR}/tests/check_preprocess_minicpmv2.py"
              --dump $<TARGET_FILE:minicpm_v2_preprocess_dump> ${_wrapper_args})
    set_tests_properties(minicpm_v2_preprocess_parity PROPERTIES TIMEOUT 300)
  endif()

  set(_check ${CMAKE_CURRENT_SOURCE_DIR}/tests/check_minicpm_v2.py)
  set(_model ${GSURG_TEST_MODELS_DIR}/minicpm_v2_model)
  gsurg_runner_check_args(_run_args minicpm_v2_run ${_model})
  add_test(NAME minicpm_v2_convert_model COMMAND ${GSURG_PYTHON} ${_check} convert --out ${_model})
  set_tests_properties(minicpm_v2_convert_model PROPERTIES FIXTURES_SETUP minicpm_v2_model TIMEOUT 600
    ENVIRONMENT "${GSURG_CHECK_ENVIRONMENT}")
  foreach(mode greedy bad-input)
    string(REPLACE "-" "_" _name "minicpm_v2_${mode}")
    add_test(NAME ${_name} COMMAND ${GSURG_PYTHON} ${_check} ${mode} ${_run_args})
    set_tests_properties(${_name} PROPERTIES FIXTURES_REQUIRED minicpm_v2_model TIMEOUT 900
      ENVIRONMENT "${GSURG_CHECK_ENVIRONMENT}")
  endforeach()

  gsurg_precision_tests(minicpm_v2 minicpm_v2 minicpm_v2_run ${_model})
endif()

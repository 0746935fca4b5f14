# Qwen3-VL's ctests. qwen3_vl_run (the alias: the same program as gsurg_run) against HF transformers'
# Qwen3-VL (tests/check_qwen3_vl.py): the tiny checkpoint converted once (fixture qwen3_vl_model), greedy
# tokens equal HF generate's over portrait / landscape / two images / text only and the debug inputs, and
# its bad inputs exit 2 naming the culprit; then the quantized and fp16 paths of gsurg_run.

# The Qwen3-VL image processor against HF transformers' Qwen2VLImageProcessorPil
# (runtime_cpp/tests/check_preprocess_qwen3vl.py, beside the shared check_preprocess.py it builds on; its
# goldens come from HF transformers, whose version pyproject's dev extra pins), through
# qwen3_vl_preprocess_dump.
gsurg_preprocess_dump(qwen3_vl_preprocess_dump tests/qwen3_vl_preprocess_dump.cpp gsurg_qwen3_vl_preprocess)

if(NOT GSURG_PYTHON)
  message(WARNING "qwen3_vl: no Python found (set GSURG_PYTHON): its parity tests are not registered")
else()
  set(_wrapper_args "")
  if(GSURG_TEST_WRAPPER)
    set(_wrapper_args --wrapper "${GSURG_TEST_WRAPPER}")
  endif()
  if(TARGET qwen3_vl_preprocess_dump)
    add_test(NAME qwen3_vl_preprocess_parity
      COMMAND "${GSURG_PYTHON}" "${PROJECT_SOURCE_DIR}/tests/check_preprocess_qwen3vl.py"
              --dump $<TARGET_FILE:qwen3_vl_preprocess_dump> ${_wrapper_args})
  endif()

  set(_check ${CMAKE_CURRENT_SOURCE_DIR}/tests/check_qwen3_vl.py)
  set(_model ${GSURG_TEST_MODELS_DIR}/qwen3_vl_model)
  gsurg_runner_check_args(_run_args qwen3_vl_run ${_model})
  add_test(NAME qwen3_vl_convert_model COMMAND ${GSURG_PYTHON} ${_check} convert --out ${_model})
  set_tests_properties(qwen3_vl_convert_model PROPERTIES FIXTURES_SETUP qwen3_vl_model TIMEOUT 600
    ENVIRONMENT "${GSURG_CHECK_ENVIRONMENT}")
  foreach(mode greedy bad-input)
    string(REPLACE "-" "_" _name "qwen3_vl_${mode}")
    add_test(NAME ${_name} COMMAND ${GSURG_PYTHON} ${_check} ${mode} ${_run_args})
    set_tests_properties(${_name} PROPERTIES FIXTURES_REQUIRED qwen3_vl_model TIMEOUT 900
      ENVIRONMENT "${GSURG_CHECK_ENVIRONMENT}")
  endforeach()

  gsurg_precision_tests(qwen3_vl qwen3_vl gsurg_run ${_model})
endif()
